-- synchro.abort_reset: aborts a reset that is not activated: its staged state
-- (every row of its target generation) and its coverage records go, its
-- candidate slot is dropped, and the old stream is as it was (blocked by what
-- blocked it before; no longer held by the reset). Refused (55000) for an
-- activated or retired reset, and while the candidate slot is in use (a
-- coordinator still streams it: stop it first). Returns the reset.
CREATE OR REPLACE FUNCTION synchro.abort_reset(id uuid)
RETURNS synchro.stream_reset
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.stream_reset;
BEGIN
    SELECT * INTO r FROM synchro.stream_reset WHERE reset_id = id FOR UPDATE;
    IF NOT FOUND OR r.phase NOT IN ('staging', 'catching_up', 'ready') THEN
        RAISE EXCEPTION 'synchro: reset % is not in progress: only a reset staging, catching up or ready can be aborted', id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = r.candidate_slot AND s.active) THEN
        RAISE EXCEPTION 'synchro: the candidate slot % of reset % is in use: stop the reset coordinator first', r.candidate_slot, id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM synchro.discard_generation(r.target_generation);
    DELETE FROM synchro.reset_coverage c WHERE c.reset_id = id;
    UPDATE synchro.stream_reset x
    SET phase = 'aborted', phase_at = now(), aborted_at = now(), aborted_by = session_user
    WHERE x.reset_id = id
    RETURNING * INTO r;
    -- Last: dropping a slot is not undone by a rollback.
    PERFORM pg_drop_replication_slot(s.slot_name) FROM pg_replication_slots s
    WHERE s.slot_name = r.candidate_slot AND s.database = current_database();
    RETURN r;
END
$$;
