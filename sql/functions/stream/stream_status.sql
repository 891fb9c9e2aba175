-- synchro.stream_status: the durable positions of the active stream beside the
-- slot's confirmed position and the WAL lag, for operators (synchroctl status,
-- psql). No row when no stream was started; NULL slot fields when the slot is gone.
-- commit_lag: synchro.commit_lag, the bound readiness holds to its limit.
-- history_pruned_commit: the capture history (event ledger, write fences) of
-- transactions up to that commit was pruned (synchro.prune_capture_history);
-- NULL when none was. Definer, like synchro.evaluate_readiness: the operator role
-- reads the positions without rights on the tables behind them.
DROP FUNCTION IF EXISTS synchro.stream_status(OUT uuid, OUT name, OUT pg_lsn, OUT pg_lsn, OUT pg_lsn, OUT pg_lsn,
    OUT pg_lsn, OUT pg_lsn, OUT bigint, OUT numeric, OUT timestamptz);
CREATE OR REPLACE FUNCTION synchro.stream_status(
    OUT stream_generation uuid, OUT slot_name name, OUT generation_start pg_lsn, OUT materialized_commit pg_lsn,
    OUT materialized_end pg_lsn, OUT processed_end pg_lsn, OUT acknowledged_end pg_lsn, OUT slot_confirmed_flush pg_lsn,
    OUT registry_generation bigint, OUT wal_lag_bytes numeric, OUT progress_updated_at timestamptz,
    OUT history_pruned_commit pg_lsn, OUT commit_lag interval)
RETURNS SETOF record
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.stream_generation, p.slot_name, p.generation_start_lsn, p.materialized_commit_lsn,
           p.materialized_end_lsn, p.processed_end_lsn, coalesce(p.acknowledged_end_lsn, p.generation_start_lsn),
           s.confirmed_flush_lsn, p.registry_generation, pg_current_wal_flush_lsn() - s.confirmed_flush_lsn, p.updated_at,
           h.pruned_commit_lsn,
           synchro.commit_lag(p.materialized_commit_time, p.caught_up_at, s.confirmed_flush_lsn, pg_current_wal_flush_lsn(),
                              clock_timestamp())
    FROM synchro.progress p
    LEFT JOIN synchro.capture_history h ON h.stream_generation = p.stream_generation
    LEFT JOIN pg_replication_slots s ON s.slot_name = p.slot_name AND s.database = current_database()
$$;
