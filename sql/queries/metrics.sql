-- name: GetCaptureState :one
-- The capture state metrics read at each scrape: WAL lag of the active
-- stream's slot in bytes, its commit lag in seconds (unknown without a usable
-- slot: commit_lag_known false), unresolved poison transactions, and the
-- slot's wal_status and safe_wal_size (NULL without a slot), and the age of the
-- pull history's retention horizon in seconds (horizon_known false while
-- nothing was pruned).
SELECT coalesce(pg_current_wal_flush_lsn() - s.confirmed_flush_lsn, 0)::float8 AS lag_bytes,
       (l.seconds IS NOT NULL)::boolean AS commit_lag_known, coalesce(l.seconds, 0)::float8 AS commit_lag_seconds,
       (SELECT count(*) FROM synchro.poison_txn WHERE resolved_at IS NULL)::float8 AS poison,
       s.wal_status, s.safe_wal_size,
       (h.horizon_age IS NOT NULL)::boolean AS horizon_known,
       coalesce(extract(epoch FROM h.horizon_age), 0)::float8 AS horizon_age_seconds
FROM synchro.progress p
LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = p.slot_name AND s.database = current_database()
CROSS JOIN LATERAL (
    SELECT extract(epoch FROM synchro.commit_lag(p.materialized_commit_time, p.caught_up_at,
                                                 s.confirmed_flush_lsn, pg_current_wal_flush_lsn(), clock_timestamp()))::float8 AS seconds
) l
LEFT JOIN LATERAL synchro.history_status() h ON h.stream_generation = p.stream_generation;
