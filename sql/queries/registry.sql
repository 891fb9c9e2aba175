-- name: GetBundleDigest :one
SELECT digest FROM synchro.function_bundle;

-- name: ListRelations :many
SELECT r.relation_id, r.registration_kind, r.schema_name, r.relation_name, r.relation_oid,
       r.key_column, r.key_type, r.generation, t.table_id, t.name AS table_name, t.push_policy
FROM synchro.relation r
LEFT JOIN synchro.synced_table t ON t.relation_id = r.relation_id
ORDER BY r.relation_id;
