-- name: TryWorkerLock :one
SELECT pg_try_advisory_lock(hashtext('synchro.worker'));

-- name: WorkerUnlock :exec
SELECT pg_advisory_unlock(hashtext('synchro.worker'));

-- name: RecordHeartbeat :exec
SELECT synchro.record_heartbeat(@worker_id::text, @state::text, @started_at::timestamptz, @slot_name::text,
       p.registry_generation, p.materialized_commit_lsn, p.materialized_end_lsn)
FROM (SELECT NULL) x LEFT JOIN synchro.progress p ON true;

-- name: GetCapturePublication :one
SELECT coalesce(publication_name, '')::text AS publication_name FROM synchro.settings;

-- name: PoisonBlocks :one
SELECT EXISTS (SELECT FROM synchro.poison_txn WHERE resolved_at IS NULL AND retry_requested_at IS NULL);

-- name: GetActiveSlot :one
SELECT slot_name FROM synchro.progress;

-- name: ClockTimestamp :one
SELECT clock_timestamp()::timestamptz AS now;

-- name: StartStream :exec
SELECT synchro.start_stream(@slot_name::text, (@generation_start::text)::pg_lsn, @created_at::timestamptz);

-- name: AdvanceSlot :exec
SELECT pg_replication_slot_advance(@slot_name::text, (@position::text)::pg_lsn);

-- name: CurrentFlushLSN :one
SELECT pg_current_wal_flush_lsn()::text AS flush_lsn, clock_timestamp()::timestamptz AS read_at;

-- name: WALBehind :one
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), (@position::text)::pg_lsn)::bigint AS behind_bytes;

-- name: Quarantine :one
SELECT synchro.quarantine((@commit_lsn::text)::pg_lsn, (@end_lsn::text)::pg_lsn, @xid::bigint, @class::text,
       sqlc.narg('sqlstate')::text, sqlc.narg('relation_id')::bigint)::bigint AS poison_id;
