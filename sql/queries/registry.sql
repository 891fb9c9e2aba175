-- name: GetBundleDigest :one
SELECT digest FROM synchro.function_bundle;

-- name: ListRelations :many
SELECT r.relation_id, r.registration_kind, r.schema_name, r.relation_name, r.relation_oid,
       r.key_column, r.key_type, r.generation, t.table_id, t.name AS table_name, t.push_policy,
       (CASE WHEN r.bootstrap_pending THEN 'bootstrapping'
             WHEN EXISTS (SELECT FROM synchro.reset_status b
                          WHERE b.kind = 'bootstrap' AND b.phase IN ('staging', 'catching_up', 'ready')
                            AND (b.registration ->> 'relation_id')::bigint = r.relation_id) THEN 'unregistering'
             WHEN EXISTS (SELECT FROM synchro.reset_status b
                          WHERE b.kind = 'bootstrap' AND b.phase IN ('staging', 'catching_up', 'ready')
                            AND (b.registration ->> 'table_id')::integer = t.table_id) THEN 'reconfiguring'
             WHEN t.table_id IS NOT NULL THEN 'served' ELSE 'captured' END)::text AS state
FROM synchro.relation r
LEFT JOIN synchro.synced_table t ON t.relation_id = r.relation_id
ORDER BY r.relation_id;

-- name: ReconfigureTable :one
SELECT coalesce(synchro.reconfigure_table((@relation::text)::regclass, @scope_rule::jsonb, @options::jsonb)::text, '')::text AS change_id;

-- name: UnregisterTable :one
SELECT synchro.unregister_table((@relation::text)::regclass)::text AS change_id;

-- name: UnregisterDependency :one
SELECT synchro.unregister_dependency((@relation::text)::regclass)::text AS change_id;
