-- name: ListPoison :many
SELECT poison_id, commit_lsn::text AS commit_lsn, end_lsn::text AS end_lsn, xid, failure_class,
       coalesce(sqlstate, '')::text AS sqlstate, relation_id, coalesce(relation, '')::text AS relation,
       attempts, first_failed_at, last_failed_at, retry_requested_at
FROM synchro.poison
ORDER BY poison_id;

-- name: RetryPoison :one
SELECT coalesce(synchro.retry_poison(sqlc.arg(poison_id)::bigint), false)::boolean AS retried;
