-- synchro.materialize_transaction: materializes a batch of whole committed source
-- transactions in commit order, in the caller's one database transaction (ADR 001,
-- "Transaction and event replay identity"):
--   * every transaction enters the replay ledger under (stream_generation,
--     commit_lsn), even when no event applies; an identity that is already durable
--     replays as a no-op (no duplicate versions, edges or effects), and a
--     transaction at or behind the high-watermark that is not durable is refused;
--   * it waits until the new transactions are visible (synchro.await_visible:
--     a commit is decoded a moment before it is visible to other snapshots);
--   * the new transactions are materialized by synchro.materialize_segment, in
--     segments cut so that a transaction changing a relation some scope rule
--     reads is evaluated on its own, against its final projected state;
--   * a retried poison transaction that now materializes is resolved with it;
--   * the progress row moves to the last transaction's end point and the
--     processed boundary to its end_lsn.
--
-- batch: [{"commit_lsn","end_lsn","xid","commit_time","event_count","registry_generation",
--          "events":[{"o": ordinal, "r": relation_id, "k": key, "op", "img": image|null,
--                     "partial": bool, "f": fence_id, "v": version}]}]
CREATE OR REPLACE FUNCTION synchro.materialize_transaction(batch jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
SET jit = off
AS $$
DECLARE
    prog synchro.progress;
    fresh jsonb;
    segment jsonb;
BEGIN
    SELECT * INTO prog FROM synchro.progress FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: no stream: the worker has not started a stream generation'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    -- Ledger first: what it already holds is a replay and is skipped.
    WITH ins AS (
        INSERT INTO synchro.txn_ledger (stream_generation, commit_lsn, end_lsn, xid, commit_time, event_count, applied_count)
        SELECT prog.stream_generation, (t ->> 'commit_lsn')::pg_lsn, (t ->> 'end_lsn')::pg_lsn, (t ->> 'xid')::bigint,
               (t ->> 'commit_time')::timestamptz, (t ->> 'event_count')::integer, jsonb_array_length(t -> 'events')
        FROM jsonb_array_elements(batch) t
        ON CONFLICT DO NOTHING
        RETURNING commit_lsn)
    SELECT coalesce(jsonb_agg(t ORDER BY (t ->> 'commit_lsn')::pg_lsn), '[]')
    INTO fresh
    FROM jsonb_array_elements(batch) t
    WHERE (t ->> 'commit_lsn')::pg_lsn IN (SELECT commit_lsn FROM ins);
    IF jsonb_array_length(fresh) = 0 THEN
        RETURN;
    END IF;
    IF (fresh -> 0 ->> 'commit_lsn')::pg_lsn <= coalesce(prog.materialized_commit_lsn, prog.generation_start_lsn) THEN
        RAISE EXCEPTION 'synchro: transaction % is not after the materialized high-watermark %',
            fresh -> 0 ->> 'commit_lsn', prog.materialized_commit_lsn
            USING ERRCODE = 'data_corrupted';
    END IF;

    PERFORM synchro.await_visible(ARRAY(SELECT (t ->> 'xid')::bigint FROM jsonb_array_elements(fresh) t));
    PERFORM synchro.materialize_scratch();
    -- Segments: a transaction that changes a relation some rule reads stands
    -- alone; the transactions between such ones form one segment each.
    FOR segment IN
        SELECT jsonb_agg(x.t ORDER BY x.ord)
        FROM (SELECT f.t, f.ord,
                     2 * coalesce(count(*) FILTER (WHERE f.reads) OVER (ORDER BY f.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                       + CASE WHEN f.reads THEN 2 ELSE 1 END AS seg
              FROM (SELECT t, ord, EXISTS (SELECT FROM jsonb_array_elements(t -> 'events') e
                                           WHERE (e ->> 'r')::bigint IN (SELECT relation_id FROM synchro.rule_read)) AS reads
                    FROM jsonb_array_elements(fresh) WITH ORDINALITY AS a(t, ord)) f) x
        GROUP BY x.seg
        ORDER BY x.seg
    LOOP
        PERFORM synchro.materialize_segment(prog.stream_generation, segment);
    END LOOP;

    UPDATE synchro.poison_txn SET resolved_at = now()
    WHERE stream_generation = prog.stream_generation AND resolved_at IS NULL
      AND commit_lsn IN (SELECT (t ->> 'commit_lsn')::pg_lsn FROM jsonb_array_elements(fresh) t);

    UPDATE synchro.progress
    SET materialized_commit_lsn = (fresh -> -1 ->> 'commit_lsn')::pg_lsn,
        materialized_end_lsn = (fresh -> -1 ->> 'end_lsn')::pg_lsn,
        processed_end_lsn = greatest(processed_end_lsn, (fresh -> -1 ->> 'end_lsn')::pg_lsn),
        registry_generation = greatest(registry_generation, (SELECT max((t ->> 'registry_generation')::bigint)
                                                              FROM jsonb_array_elements(fresh) t)),
        updated_at = now();
END
$$;
