-- synchro.request_barrier: writes the activation barrier of a reset catching
-- up: in this one transaction its xid and snapshot are recorded and a
-- transactional message (prefix synchro.reset, the reset id) is emitted, so
-- that the candidate slot's output always reaches it: the staged catch-up
-- ends with the transaction that carries it (synchro.advance_stage). A
-- barrier already requested is kept (false).
CREATE OR REPLACE FUNCTION synchro.request_barrier(id uuid)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE synchro.stream_reset r SET barrier_xid = pg_current_xact_id(), barrier_snapshot = pg_current_snapshot()
    WHERE r.reset_id = id AND r.phase = 'catching_up' AND r.barrier_xid IS NULL;
    IF NOT FOUND THEN
        IF EXISTS (SELECT FROM synchro.stream_reset r WHERE r.reset_id = id AND r.phase = 'catching_up') THEN
            RETURN false;
        END IF;
        RAISE EXCEPTION 'synchro: reset % is not catching up', id USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM pg_logical_emit_message(true, 'synchro.reset', id::text);
    RETURN true;
END
$$;
