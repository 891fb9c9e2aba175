-- synchro.schema_manifest: the canonical schema manifest of the synced tables
-- (docs/protocol.md, "GET /sync/schema") without version and hash: tables by
-- wire name with key, columns (synced, in registration order, portable types),
-- composition (multi_scope when the rule can put a row in several scopes) and
-- the table's indexes over synced columns only. A table waiting for its
-- projection bootstrap is left out. Deterministic for one registry.
CREATE OR REPLACE FUNCTION synchro.schema_manifest()
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('tables', coalesce(jsonb_agg(tbl ORDER BY name COLLATE "C"), '[]'))
    FROM (
        SELECT t.name,
               jsonb_build_object(
                   'name', t.name,
                   'primary_key', jsonb_build_array(r.key_column),
                   'updated_at_column', t.updated_at_column,
                   'deleted_at_column', t.deleted_at_column,
                   'composition', CASE WHEN t.scope_rule ->> 'kind' IN ('members', 'sql') THEN 'multi_scope' ELSE 'single_scope' END,
                   'read_only', t.push_policy = 'read_only',
                   'columns', (SELECT jsonb_agg(jsonb_build_object(
                                   'name', a.attname,
                                   'type', synchro.portable_type(a.atttypid::regtype),
                                   'nullable', NOT a.attnotnull) ORDER BY c.ord)
                               FROM unnest(t.sync_columns) WITH ORDINALITY AS c(col, ord)
                               JOIN pg_attribute a ON a.attrelid = r.relation_oid AND a.attname = c.col),
                   'indexes', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                                   'name', i.relname, 'unique', x.indisunique, 'columns', cols.names) ORDER BY i.relname), '[]')
                               FROM pg_index x
                               JOIN pg_class i ON i.oid = x.indexrelid
                               CROSS JOIN LATERAL (SELECT jsonb_agg(a.attname ORDER BY k.n) AS names,
                                                          bool_and(a.attname = ANY (t.sync_columns)) AS synced
                                                   FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
                                                   LEFT JOIN pg_attribute a ON a.attrelid = r.relation_oid AND a.attnum = k.attnum) cols
                               WHERE x.indrelid = r.relation_oid AND NOT x.indisprimary AND x.indexprs IS NULL
                                 AND x.indpred IS NULL AND cols.synced)
               ) AS tbl
        FROM synchro.synced_table t
        JOIN synchro.relation r ON r.relation_id = t.relation_id
        WHERE NOT r.bootstrap_pending
    ) s
$$;
