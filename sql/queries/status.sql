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

-- name: GetHistoryStatus :one
-- The retention horizon of the active stream's pull history and the last
-- pruning round (synchro.history_status): horizon empty, times NULL, ages and the
-- round's duration -1 and counts 0 while nothing was pruned.
SELECT coalesce(horizon_lsn::text, '')::text AS horizon,
       horizon_materialized_at::timestamptz AS horizon_materialized_at,
       coalesce(extract(epoch FROM horizon_age), -1)::float8 AS horizon_age_seconds,
       advanced_at::timestamptz AS advanced_at,
       round_started_at::timestamptz AS round_started_at, round_ended_at::timestamptz AS round_ended_at,
       coalesce(extract(epoch FROM round_took), -1)::float8 AS round_seconds,
       coalesce(round_effects, 0)::bigint AS round_effects, coalesce(round_versions, 0)::bigint AS round_versions,
       coalesce(round_edges, 0)::bigint AS round_edges, coalesce(round_digests, 0)::bigint AS round_digests
FROM synchro.history_status();

-- name: ListStorage :many
-- The storage each table of schema synchro takes, largest first (synchro.storage_status).
SELECT table_name::text AS table_name, rows_estimate::bigint AS rows_estimate, table_bytes::bigint AS table_bytes,
       index_bytes::bigint AS index_bytes, total_bytes::bigint AS total_bytes
FROM synchro.storage_status();
