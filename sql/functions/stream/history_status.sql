-- synchro.history_status: the retention of the active stream's pull history,
-- for operators (synchroctl status, psql, metrics). One row while a stream
-- exists, none before. horizon_lsn: the retention horizon
-- (synchro.history_horizon); a scope cursor before the end of its transaction
-- is answered with rebuild, a rebuild session before it with rebuild_expired.
-- horizon_materialized_at and horizon_age: when that transaction was
-- materialized and how long ago, so how far back pulls still resume.
-- advanced_at: when the horizon last moved. The last pruning round: when it
-- began and ended, how long it took, and the effects, row versions, membership
-- edges and scope digests it removed. Every column but the generation is NULL
-- while nothing of the stream was pruned. Positions, times and counts only,
-- never row data. Definer, like synchro.stream_status: the operator role reads
-- them without rights on the tables behind them.
CREATE OR REPLACE FUNCTION synchro.history_status(
    OUT stream_generation uuid, OUT horizon_lsn pg_lsn, OUT horizon_materialized_at timestamptz,
    OUT horizon_age interval, OUT advanced_at timestamptz, OUT round_started_at timestamptz,
    OUT round_ended_at timestamptz, OUT round_took interval, OUT round_effects bigint, OUT round_versions bigint,
    OUT round_edges bigint, OUT round_digests bigint)
RETURNS SETOF record
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.stream_generation, h.horizon_lsn, l.materialized_at, clock_timestamp() - l.materialized_at, h.advanced_at,
           h.round_started_at, h.round_ended_at, h.round_ended_at - h.round_started_at,
           h.round_effects, h.round_versions, h.round_edges, h.round_digests
    FROM synchro.progress p
    LEFT JOIN synchro.history_horizon h ON h.stream_generation = p.stream_generation
    LEFT JOIN synchro.txn_ledger l ON l.stream_generation = h.stream_generation AND l.commit_lsn = h.horizon_lsn
$$;
