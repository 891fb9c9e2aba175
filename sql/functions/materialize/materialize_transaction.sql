-- synchro.materialize_transaction: materializes a batch of whole committed source
-- transactions in commit order, in the caller's one database transaction
-- (docs/change-stream.md, "Transaction and event replay identity"). The caller
-- creates the scratch tables (synchro.materialize_scratch) and stages the batch's
-- applicable events in synchro_seg_event first; missing, extra or misplaced
-- events, or a second call, refuse the batch (22023; no scratch tables: 55000).
-- Every transaction enters the replay ledger under (stream_generation,
-- commit_lsn), even with no applicable event; a durable identity replays as a
-- no-op; one at or behind the high-watermark that is not durable is refused. It
-- waits until the transactions are visible (synchro.await_visible), records enum
-- labels (drift), materializes them in segments (synchro.materialize_segment,
-- each reading only its own scratch rows, so a segment costs the same whatever
-- the batch's size),
-- raises a foreign error again with its SQLSTATE only (no row values), resolves a
-- retried poison that now materializes, and moves progress to the last
-- transaction's end (with its source commit time) and the processed boundary.
-- With staged (a reset's target generation), the batch materializes into that
-- reset's stage instead (synchro.stream_progress), and its barrier transaction
-- ends the stage's catch-up (synchro.advance_stage). While a reset is in
-- progress the active stream is held blocked: a batch for it is refused
-- (SR001, which the worker treats as a block, not as a poison). A transaction
-- that names a bootstrap (its barrier, which the worker found ready) stands
-- alone in its segment, and the bootstrap is activated right after it
-- (synchro.activate_bootstrap), before any later transaction of the batch.
-- batch: [{"commit_lsn","end_lsn","xid","commit_time","event_count","applied","registry_generation","bootstrap"}];
-- synchro_seg_event: seq (place in the batch from 1), commit_lsn, o (event ordinal),
-- r (relation_id), k (key), op, img (NULL for a delete), partial (image lacks
-- unchanged TOAST values), f (fence_id), v (version).
DROP FUNCTION IF EXISTS synchro.materialize_transaction(jsonb);
CREATE OR REPLACE FUNCTION synchro.materialize_transaction(batch jsonb, staged uuid DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    prog synchro.progress;
    behind pg_lsn;
    fresh integer;
    lo integer;
    hi integer;
    txn_tids tid[];
    event_tids tid[];
    activates boolean;
    scratch_rows integer := 0;
    failed_state text;
    failed_message text;
BEGIN
    prog := synchro.stream_progress(staged, true);
    IF staged IS NULL AND EXISTS (SELECT FROM synchro.stream_reset r WHERE r.phase IN ('staging', 'catching_up', 'ready') AND r.kind = 'reset') THEN
        RAISE EXCEPTION 'synchro: a stream reset is in progress: the stream stays blocked until it is activated or aborted'
            USING ERRCODE = 'SR001';
    END IF;
    IF to_regclass('pg_temp.synchro_seg_txn') IS NULL THEN
        RAISE EXCEPTION 'synchro: no staged batch: create the scratch tables (synchro.materialize_scratch) and stage the events first'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    -- The batch, parsed once; seq numbers its transactions in the batch's order,
    -- which must be commit order.
    IF EXISTS (SELECT FROM synchro_seg_txn) THEN
        RAISE EXCEPTION 'synchro: one batch per database transaction: this one already materialized a batch'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO synchro_seg_txn (seq, commit_lsn, end_lsn, xid, commit_time, event_count, applied, registry_generation, bootstrap)
    SELECT t.seq, t.commit_lsn, t.end_lsn, t.xid, t.commit_time, t.event_count, t.applied, t.registry_generation, t.bootstrap
    FROM ROWS FROM (jsonb_to_recordset(batch) AS (commit_lsn pg_lsn, end_lsn pg_lsn, xid bigint, commit_time timestamptz,
                                                  event_count integer, applied integer, registry_generation bigint, bootstrap uuid))
         WITH ORDINALITY AS t(commit_lsn, end_lsn, xid, commit_time, event_count, applied, registry_generation, bootstrap, seq);
    IF EXISTS (SELECT FROM (SELECT t.commit_lsn <= lag(t.commit_lsn) OVER (ORDER BY t.seq) AS back FROM synchro_seg_txn t) x
               WHERE x.back) THEN
        RAISE EXCEPTION 'synchro: the batch does not list its transactions in commit order'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The staged events are exactly the ones the batch counts, each under its
    -- transaction's place and commit_lsn.
    IF EXISTS (SELECT FROM synchro_seg_txn t
               FULL JOIN (SELECT e.seq, count(*) AS n, min(e.commit_lsn) AS lo, max(e.commit_lsn) AS hi
                          FROM synchro_seg_event e GROUP BY e.seq) e ON e.seq = t.seq
               WHERE coalesce(e.n, 0) IS DISTINCT FROM t.applied OR e.lo <> t.commit_lsn OR e.hi <> t.commit_lsn) THEN
        RAISE EXCEPTION 'synchro: the staged events do not match the batch (missing, extra, or under another transaction)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Replays: a transaction at or behind the high-watermark must already be in
    -- the ledger (durable) and is skipped; every later one is new. Replays thus
    -- precede every new transaction, and their events lie outside every segment.
    SELECT t.commit_lsn INTO behind
    FROM synchro_seg_txn t
    WHERE t.commit_lsn <= coalesce(prog.materialized_commit_lsn, prog.generation_start_lsn)
      AND NOT EXISTS (SELECT FROM synchro.txn_ledger l
                      WHERE l.stream_generation = prog.stream_generation AND l.commit_lsn = t.commit_lsn)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'synchro: transaction % is not after the materialized high-watermark % and not durable',
            behind, coalesce(prog.materialized_commit_lsn, prog.generation_start_lsn)
            USING ERRCODE = 'data_corrupted';
    END IF;
    DELETE FROM synchro_seg_txn t WHERE t.commit_lsn <= coalesce(prog.materialized_commit_lsn, prog.generation_start_lsn);
    SELECT count(*), min(t.seq) INTO fresh, lo FROM synchro_seg_txn t;
    IF fresh = 0 THEN
        RETURN;
    END IF;
    INSERT INTO synchro.txn_ledger (stream_generation, commit_lsn, end_lsn, xid, commit_time, event_count, applied_count)
    SELECT prog.stream_generation, t.commit_lsn, t.end_lsn, t.xid, t.commit_time, t.event_count, t.applied
    FROM synchro_seg_txn t;
    PERFORM synchro.await_visible(ARRAY(SELECT t.xid FROM synchro_seg_txn t));
    PERFORM synchro.record_decoded_enum_labels();

    -- Errors raised while segments are materialized can quote row values (a
    -- rule's cast or a unique violation's key): PostgreSQL would write them to
    -- its log and hand them to the worker. Such an error is raised again with
    -- its SQLSTATE only; Synchro's own errors quote no row values and pass as
    -- they are.
    BEGIN
        -- Segments: a transaction that changes a relation some rule reads
        -- (synchro.segmenting_relation), or that activates a bootstrap,
        -- stands alone; the transactions between such ones form one segment each.
        -- Each segment also gets the range of tuples (ctid) its transactions
        -- and its events occupy in the scratch tables, so that a segment reads
        -- its own rows only, whatever the batch's size.
        FOR lo, hi, txn_tids, event_tids, activates IN
            SELECT min(x.seq), max(x.seq), ARRAY[min(x.tid), max(x.tid)], ARRAY[min(x.first_event), max(x.last_event)],
                   bool_or(x.bootstrap)
            FROM (SELECT t.seq, t.ctid AS tid, e.first_event, e.last_event, t.bootstrap IS NOT NULL AS bootstrap,
                         2 * count(r.seq) OVER (ORDER BY t.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                         + CASE WHEN r.seq IS NULL THEN 1 ELSE 2 END AS seg
                  FROM synchro_seg_txn t
                  LEFT JOIN (SELECT e.seq, min(e.ctid) AS first_event, max(e.ctid) AS last_event
                             FROM synchro_seg_event e GROUP BY e.seq) e ON e.seq = t.seq
                  LEFT JOIN (SELECT DISTINCT e.seq FROM synchro_seg_event e
                             WHERE e.r IN (SELECT relation_id FROM synchro.segmenting_relation)
                             UNION
                             SELECT b.seq FROM synchro_seg_txn b WHERE b.bootstrap IS NOT NULL) r ON r.seq = t.seq) x
            GROUP BY x.seg
            ORDER BY x.seg
        LOOP
            -- The segments before left their rows in the scratch tables: emptied
            -- by DELETE, which is cheap but leaves dead rows that every later
            -- statement of the batch scans, or by TRUNCATE once they held more
            -- than a thousand rows since the last one, which leaves none but
            -- costs about half a millisecond (two of the tables have a TOAST
            -- index to rebuild).
            IF scratch_rows > 1000 THEN
                TRUNCATE synchro_seg_change, synchro_seg_impact, synchro_seg_scope, synchro_seg_prev, synchro_seg_diff;
                scratch_rows := 0;
            ELSIF scratch_rows > 0 THEN
                DELETE FROM synchro_seg_change;
                DELETE FROM synchro_seg_impact;
                DELETE FROM synchro_seg_scope;
                DELETE FROM synchro_seg_prev;
                DELETE FROM synchro_seg_diff;
            END IF;
            scratch_rows := scratch_rows + synchro.materialize_segment(prog.stream_generation, lo, hi, txn_tids, event_tids);
            IF staged IS NULL AND activates THEN
                PERFORM synchro.activate_bootstrap(t.bootstrap, t.commit_lsn)
                FROM synchro_seg_txn t WHERE t.ctid BETWEEN txn_tids[1] AND txn_tids[2] AND t.seq = lo AND t.bootstrap IS NOT NULL;
            END IF;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS failed_state = RETURNED_SQLSTATE, failed_message = MESSAGE_TEXT;
        IF failed_message LIKE 'synchro: %' THEN
            RAISE;
        END IF;
        RAISE EXCEPTION 'synchro: materialization failed with SQLSTATE % (the cause is not shown: it can quote row values)', failed_state
            USING ERRCODE = failed_state;
    END;

    IF staged IS NOT NULL THEN
        PERFORM synchro.advance_stage(staged);
        RETURN;
    END IF;
    UPDATE synchro.poison_txn SET resolved_at = now()
    WHERE stream_generation = prog.stream_generation AND resolved_at IS NULL
      AND commit_lsn IN (SELECT t.commit_lsn FROM synchro_seg_txn t);

    UPDATE synchro.progress p
    SET (materialized_commit_lsn, materialized_commit_time, materialized_end_lsn, processed_end_lsn, registry_generation, updated_at) =
        (SELECT t.commit_lsn, t.commit_time, t.end_lsn, greatest(p.processed_end_lsn, t.end_lsn),
                greatest(p.registry_generation, (SELECT max(a.registry_generation) FROM synchro_seg_txn a)), now()
         FROM synchro_seg_txn t ORDER BY t.seq DESC LIMIT 1);
END
$$;
