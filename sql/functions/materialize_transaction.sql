-- synchro.materialize_transaction: materializes a batch of whole committed source
-- transactions, serially in commit order, in the caller's one database
-- transaction (ADR 001, "Transaction and event replay identity"). For each:
--   * the transaction and its applicable events enter the replay ledger under
--     (stream_generation, commit_lsn[, event_ordinal]); an identity that is already
--     durable replays as a no-op (no duplicate versions, edges or effects), and a
--     transaction behind the high-watermark that is not durable is refused;
--   * every captured image is applied to the projections; the impacted synced rows
--     (own changes, plus rows that rules reading a changed relation point at) are
--     evaluated against the transaction's final projected state;
--   * changed rows get immutable versions (the fence's opaque version) with row
--     checksums; membership edges open and close at the transaction's position;
--     net pull effects are written per scope at (commit_lsn, event_ordinal,
--     effect_ordinal), effect ordinals in (table_id, typed key, operation) order;
--     each changed scope's digest is recorded at the position;
--   * the reconciled fences are marked materialized.
-- Finally the progress row moves to the last transaction's end point and the
-- processed boundary to its end_lsn. It never reads live application tables.
--
-- batch: [{"commit_lsn","end_lsn","xid","commit_time","event_count","registry_generation",
--          "events":[{"o": ordinal, "r": relation_id, "k": key, "op", "img": image|null,
--                     "partial": bool, "f": fence_id, "v": version}]}]
CREATE OR REPLACE FUNCTION synchro.materialize_transaction(batch jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    prog synchro.progress;
    gen uuid;
    txn jsonb;
    commit_at pg_lsn;
    last_commit pg_lsn;
    last_end pg_lsn;
    registry_gen bigint;
BEGIN
    SELECT * INTO prog FROM synchro.progress FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: no stream: the worker has not started a stream generation' USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    gen := prog.stream_generation;
    last_commit := prog.materialized_commit_lsn;
    last_end := prog.materialized_end_lsn;
    registry_gen := prog.registry_generation;
    PERFORM synchro.materialize_scratch();

    FOR txn IN SELECT * FROM jsonb_array_elements(batch) LOOP
        commit_at := (txn ->> 'commit_lsn')::pg_lsn;
        INSERT INTO synchro.txn_ledger (stream_generation, commit_lsn, end_lsn, xid, commit_time, event_count, applied_count)
        VALUES (gen, commit_at, (txn ->> 'end_lsn')::pg_lsn, (txn ->> 'xid')::bigint, (txn ->> 'commit_time')::timestamptz,
                (txn ->> 'event_count')::integer, jsonb_array_length(txn -> 'events'))
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            CONTINUE; -- durable replay identity: already materialized
        END IF;
        IF commit_at <= coalesce(last_commit, prog.generation_start_lsn) THEN
            RAISE EXCEPTION 'synchro: transaction % is not after the materialized high-watermark %', commit_at, last_commit
                USING ERRCODE = 'data_corrupted';
        END IF;
        PERFORM synchro.materialize_one(gen, commit_at, txn -> 'events');
        -- A retried poison transaction that now materializes is resolved with it.
        UPDATE synchro.poison_txn SET resolved_at = now()
        WHERE stream_generation = gen AND commit_lsn = commit_at AND resolved_at IS NULL;
        last_commit := commit_at;
        last_end := (txn ->> 'end_lsn')::pg_lsn;
        registry_gen := greatest(registry_gen, (txn ->> 'registry_generation')::bigint);
    END LOOP;

    UPDATE synchro.progress
    SET materialized_commit_lsn = last_commit,
        materialized_end_lsn = last_end,
        processed_end_lsn = greatest(processed_end_lsn, last_end),
        registry_generation = registry_gen,
        updated_at = now();
END
$$;
