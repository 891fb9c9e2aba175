-- synchro.retire_reset: controlled cleanup after an activated reset (its
-- activation committed: durable, and recorded with who activated it): the old
-- generation's derived state (synchro.discard_generation), the fences the
-- baseline covered and the reset's coverage records go, and the old slot is dropped unless another stream uses
-- it. An activated bootstrap's retirement removes what is left of its stage
-- (the staged versions and ledgers; its projections became the active ones)
-- and drops its candidate slot. Records and returns what it removed; refused
-- (55000) unless activated, and while the slot to drop is in use.
CREATE OR REPLACE FUNCTION synchro.retire_reset(id uuid)
RETURNS synchro.stream_reset
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.stream_reset;
    removed jsonb;
    n bigint;
    slot_dropped boolean;
    covered bigint;
BEGIN
    SELECT * INTO r FROM synchro.stream_reset WHERE reset_id = id FOR UPDATE;
    IF NOT FOUND OR r.phase <> 'activated' OR r.activated_at IS NULL THEN
        RAISE EXCEPTION 'synchro: reset % is not activated: only an activated reset is retired', id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF r.kind = 'bootstrap' THEN
        IF EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = r.candidate_slot AND s.active) THEN
            RAISE EXCEPTION 'synchro: the candidate slot % is in use: stop the bootstrap coordinator first', r.candidate_slot
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        -- The fences of the bootstrap's relations from before its barrier: the
        -- baseline covered those it saw, the staged catch-up materialized the
        -- others; the active stream never will.
        -- (A reconfigured table's were materialized by the active stream too;
        -- those stay until history pruning takes them.)
        DELETE FROM synchro.fence f USING synchro.event_ledger l
        WHERE l.stream_generation = r.target_generation AND l.fence_id = f.fence_id
          AND NOT EXISTS (SELECT FROM synchro.event_ledger a WHERE a.fence_id = f.fence_id AND a.stream_generation = (SELECT p.stream_generation FROM synchro.progress p));
        GET DIAGNOSTICS n = ROW_COUNT;
        DELETE FROM synchro.fence f USING synchro.reset_coverage c
        WHERE c.fence_id = f.fence_id AND c.reset_id = id
          AND NOT EXISTS (SELECT FROM synchro.event_ledger a WHERE a.fence_id = f.fence_id AND a.stream_generation = (SELECT p.stream_generation FROM synchro.progress p));
        GET DIAGNOSTICS covered = ROW_COUNT;
        DELETE FROM synchro.reset_coverage c WHERE c.reset_id = id;
        removed := synchro.discard_generation(r.target_generation) || jsonb_build_object('fence', n + covered);
        slot_dropped := EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = r.candidate_slot AND s.database = current_database());
        UPDATE synchro.stream_reset x
        SET phase = 'retired', phase_at = now(), retired_at = now(), retired_by = session_user,
            retirement = removed || jsonb_build_object('slot', CASE WHEN slot_dropped THEN r.candidate_slot END)
        WHERE x.reset_id = id
        RETURNING * INTO r;
        IF slot_dropped THEN
            PERFORM pg_drop_replication_slot(r.candidate_slot);
        END IF;
        RETURN r;
    END IF;
    IF EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = r.source_slot AND s.active) THEN
        RAISE EXCEPTION 'synchro: the old slot % is in use: stop what streams it first', r.source_slot
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    removed := synchro.discard_generation(r.source_generation);
    -- The fences the baseline covered were committed before it: the new
    -- generation holds their rows' versions, and no ledger names them any more.
    DELETE FROM synchro.fence f USING synchro.reset_coverage c WHERE c.fence_id = f.fence_id AND c.reset_id = id;
    GET DIAGNOSTICS n = ROW_COUNT;
    removed := removed || jsonb_build_object('fence', n);
    DELETE FROM synchro.reset_coverage c WHERE c.reset_id = id;
    GET DIAGNOSTICS n = ROW_COUNT;
    slot_dropped := EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = r.source_slot AND s.database = current_database())
                    AND r.source_slot <> (SELECT p.slot_name FROM synchro.progress p);
    UPDATE synchro.stream_reset x
    SET phase = 'retired', phase_at = now(), retired_at = now(), retired_by = session_user,
        retirement = removed || jsonb_build_object('reset_coverage', n, 'slot', CASE WHEN slot_dropped THEN r.source_slot END)
    WHERE x.reset_id = id
    RETURNING * INTO r;
    -- Last: dropping a slot is not undone by a rollback.
    IF slot_dropped THEN
        PERFORM pg_drop_replication_slot(r.source_slot);
    END IF;
    RETURN r;
END
$$;
