-- synchro.rule_read: which registered relations each synced table's scope rule
-- reads besides the table itself (path steps of path rules and of members rules
-- with a "path", members relation, sql impacts). A change to such a relation can
-- change the membership of the table's rows.
CREATE OR REPLACE VIEW synchro.rule_read AS
SELECT t.table_id, (hop ->> 'relation_id')::bigint AS relation_id
FROM synchro.synced_table t, jsonb_array_elements(t.scope_rule -> 'path') hop
WHERE t.scope_rule ->> 'kind' IN ('path', 'members')
UNION
SELECT t.table_id, (t.scope_rule ->> 'relation_id')::bigint
FROM synchro.synced_table t
WHERE t.scope_rule ->> 'kind' = 'members'
UNION
SELECT t.table_id, dep::bigint
FROM synchro.synced_table t, jsonb_object_keys(t.scope_rule -> 'impacts') dep
WHERE t.scope_rule ->> 'kind' = 'sql';
