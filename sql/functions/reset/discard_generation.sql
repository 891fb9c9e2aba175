-- synchro.discard_generation: removes every row of stream generation gen from
-- the derived state (projections, row versions, membership edges, effects,
-- scope digests, the replay ledgers, poison records, history pruning's mark
-- and retention horizon), returning what it removed per table. Only a reset's abort (its stage)
-- and retirement (the old generation) call it, never for the active generation
-- (refused, 55000).
CREATE OR REPLACE FUNCTION synchro.discard_generation(gen uuid)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    removed jsonb := '{}';
    t text;
    n bigint;
BEGIN
    IF gen = (SELECT p.stream_generation FROM synchro.progress p) THEN
        RAISE EXCEPTION 'synchro: generation % is the active one', gen USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    FOREACH t IN ARRAY ARRAY['effect', 'membership', 'scope_digest', 'row_version', 'projection', 'event_ledger',
                             'txn_ledger', 'poison_txn', 'capture_history', 'history_horizon'] LOOP
        EXECUTE format('DELETE FROM synchro.%I WHERE stream_generation = $1', t) USING gen;
        GET DIAGNOSTICS n = ROW_COUNT;
        removed := removed || jsonb_build_object(t, n);
    END LOOP;
    RETURN removed;
END
$$;
