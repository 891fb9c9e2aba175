-- synchro.prune_capture_history: removes the event-ledger rows and the write
-- fences of at most max_txns source transactions of the active stream
-- generation, oldest first, each of them acknowledged (its transaction end at or
-- before the durable acknowledgement, so the slot can never send it again) and
-- materialized more than keep ago. It stops at the first transaction that is not
-- both. It keeps the transaction ledger (every replay identity stays durable),
-- row versions, membership edges, effects, scope digests and poison records,
-- and never touches a fence that is not materialized (it removes the fences the
-- pruned ledger rows name). The retention compares
-- as an interval (a month is 30 days). It records how far it pruned in
-- synchro.capture_history and takes no lock that materialization holds, so a
-- call never waits for a batch. Returns how many transactions and events it
-- pruned; zeros when there is nothing to prune or another session is pruning.
CREATE OR REPLACE FUNCTION synchro.prune_capture_history(keep interval, max_txns integer,
    OUT transactions bigint, OUT events bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    prog synchro.progress;
    pruned pg_lsn;
    upto pg_lsn;
BEGIN
    transactions := 0;
    events := 0;
    IF keep IS NULL OR keep < interval '0' OR max_txns IS NULL OR max_txns < 1 THEN
        RAISE EXCEPTION 'synchro: prune_capture_history needs a retention of zero or more and a positive transaction limit'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('synchro.prune_capture_history')) THEN
        RETURN;
    END IF;
    SELECT * INTO prog FROM synchro.progress;
    IF NOT FOUND OR prog.acknowledged_end_lsn IS NULL THEN
        RETURN;
    END IF;
    pruned := coalesce((SELECT h.pruned_commit_lsn FROM synchro.capture_history h
                        WHERE h.stream_generation = prog.stream_generation), prog.generation_start_lsn);

    SELECT count(*), max(x.commit_lsn) INTO transactions, upto
    FROM (SELECT l.commit_lsn,
                 bool_and(l.end_lsn <= prog.acknowledged_end_lsn AND now() - l.materialized_at > keep)
                     OVER (ORDER BY l.commit_lsn) AS prunable
          FROM (SELECT l.commit_lsn, l.end_lsn, l.materialized_at FROM synchro.txn_ledger l
                WHERE l.stream_generation = prog.stream_generation
                  AND l.commit_lsn > pruned
                ORDER BY l.commit_lsn
                LIMIT max_txns) l) x
    WHERE x.prunable;
    IF upto IS NULL THEN
        RETURN;
    END IF;

    WITH gone AS (
        DELETE FROM synchro.event_ledger e
        WHERE e.stream_generation = prog.stream_generation
          AND e.commit_lsn > pruned
          AND e.commit_lsn <= upto
        RETURNING e.fence_id),
    fences AS (
        DELETE FROM synchro.fence f
        WHERE f.fence_id = ANY (ARRAY(SELECT g.fence_id FROM gone g)))
    SELECT count(*) INTO events FROM gone;

    INSERT INTO synchro.capture_history AS h (stream_generation, pruned_commit_lsn)
    VALUES (prog.stream_generation, upto)
    ON CONFLICT (stream_generation) DO UPDATE SET pruned_commit_lsn = EXCLUDED.pruned_commit_lsn, pruned_at = now();
END
$$;
