-- name: GetStreamStatus :one
SELECT stream_generation::text AS stream_generation, slot_name::text AS slot_name,
       generation_start::text AS generation_start,
       coalesce(materialized_commit::text, '')::text AS materialized_commit,
       coalesce(materialized_end::text, '')::text AS materialized_end,
       processed_end::text AS processed_end, acknowledged_end::text AS acknowledged_end,
       coalesce(slot_confirmed_flush::text, '')::text AS slot_confirmed_flush,
       registry_generation::bigint AS registry_generation, coalesce(wal_lag_bytes, -1)::bigint AS wal_lag_bytes,
       progress_updated_at::timestamptz AS progress_updated_at,
       coalesce(history_pruned_commit::text, '')::text AS history_pruned_commit,
       coalesce(extract(epoch FROM commit_lag), -1)::float8 AS commit_lag_seconds
FROM synchro.stream_status();

-- name: ListWorkers :many
SELECT worker_id, state, database_name::text AS database_name, heartbeat_at,
       extract(epoch FROM now() - heartbeat_at)::float8 AS age_seconds,
       coalesce(materialized_end_lsn::text, '')::text AS materialized_end
FROM synchro.worker_heartbeat
ORDER BY heartbeat_at DESC;
