-- synchro.commit_lag: an upper bound on how long a committed source transaction
-- has waited to be materialized, from the stream's progress and the slot's and
-- the WAL's flush positions read at time "at". Zero once the slot reached the
-- flush position. Otherwise every transaction still pending committed after the
-- newest materialized one (materialized_commit_time, its source commit time)
-- and after the time through which an idle acknowledgement found everything
-- processed (caught_up_at): the lag is the time since the later of the two.
-- NULL when the slot position or both times are unknown. Readiness, synchroctl
-- status (synchro.stream_status) and the metric synchro_capture_lag_seconds all
-- read it here.
CREATE OR REPLACE FUNCTION synchro.commit_lag(materialized_commit_time timestamptz, caught_up_at timestamptz,
                                              slot_lsn pg_lsn, flush_lsn pg_lsn, at timestamptz)
RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN slot_lsn IS NULL THEN NULL
                WHEN slot_lsn OPERATOR(pg_catalog.>=) flush_lsn THEN interval '0'
                ELSE at OPERATOR(pg_catalog.-) greatest(materialized_commit_time, caught_up_at)
           END
$$;
