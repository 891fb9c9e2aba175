-- synchro.discard_generation: removes every row of stream generation gen from
-- the derived state (projections, row versions, membership edges, effects,
-- scope digests, the replay ledgers and poison records), returning what it
-- removed per table. Only a reset's abort (its stage) and retirement (the old
-- generation) call it, never for the active generation (refused, 55000).
CREATE OR REPLACE FUNCTION synchro.discard_generation(gen uuid)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    removed jsonb := '{}';
    n bigint;
BEGIN
    IF gen = (SELECT p.stream_generation FROM synchro.progress p) THEN
        RAISE EXCEPTION 'synchro: generation % is the active one', gen USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    DELETE FROM synchro.effect WHERE stream_generation = gen;
    GET DIAGNOSTICS n = ROW_COUNT; removed := removed || jsonb_build_object('effect', n);
    DELETE FROM synchro.membership WHERE stream_generation = gen;
    GET DIAGNOSTICS n = ROW_COUNT; removed := removed || jsonb_build_object('membership', n);
    DELETE FROM synchro.scope_digest WHERE stream_generation = gen;
    GET DIAGNOSTICS n = ROW_COUNT; removed := removed || jsonb_build_object('scope_digest', n);
    DELETE FROM synchro.row_version WHERE stream_generation = gen;
    GET DIAGNOSTICS n = ROW_COUNT; removed := removed || jsonb_build_object('row_version', n);
    DELETE FROM synchro.projection WHERE stream_generation = gen;
    GET DIAGNOSTICS n = ROW_COUNT; removed := removed || jsonb_build_object('projection', n);
    DELETE FROM synchro.event_ledger WHERE stream_generation = gen;
    GET DIAGNOSTICS n = ROW_COUNT; removed := removed || jsonb_build_object('event_ledger', n);
    DELETE FROM synchro.txn_ledger WHERE stream_generation = gen;
    GET DIAGNOSTICS n = ROW_COUNT; removed := removed || jsonb_build_object('txn_ledger', n);
    DELETE FROM synchro.poison_txn WHERE stream_generation = gen;
    GET DIAGNOSTICS n = ROW_COUNT; removed := removed || jsonb_build_object('poison_txn', n);
    RETURN removed;
END
$$;
