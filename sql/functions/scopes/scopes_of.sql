-- synchro.scopes_of: the scopes a synced row with the given image belongs to under
-- its table's (normalized) scope rule. Shared and column rules are evaluated here
-- from the row's own image; path, members and sql rules read other rows through
-- synchro.scopes_by_lookup (over projections when live = false, as
-- materialization does; over the live rows push's write policy sees when live =
-- true). A plain SQL function without a SET clause and with schema-qualified
-- names, so that the planner inlines it: materialization evaluates it for every
-- changed row, and a PL/pgSQL call per row cost several times more than the rule.
CREATE OR REPLACE FUNCTION synchro.scopes_of(rule jsonb, key text, image jsonb, live boolean)
RETURNS SETOF text
LANGUAGE sql STABLE
AS $$
    SELECT rule OPERATOR(pg_catalog.->>) 'scope'
    WHERE rule OPERATOR(pg_catalog.->>) 'kind' OPERATOR(pg_catalog.=) 'shared'
    UNION ALL
    SELECT s FROM (SELECT synchro.render_template(rule OPERATOR(pg_catalog.->>) 'template', image) AS s) r
    WHERE rule OPERATOR(pg_catalog.->>) 'kind' OPERATOR(pg_catalog.=) 'column' AND s IS NOT NULL
    UNION ALL
    SELECT s FROM synchro.scopes_by_lookup(rule, key, image, live) s
    WHERE rule OPERATOR(pg_catalog.->>) 'kind' OPERATOR(pg_catalog.<>) ALL (ARRAY['shared', 'column'])
$$;
