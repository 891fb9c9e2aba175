-- synchro.restart_bootstrap: starts bootstrap id (left in staging by a
-- coordinator that died before its baseline committed) over: what it staged
-- goes with its candidate slot, and it is staging again under a new candidate
-- slot name and stage generation, with the same registry change to apply.
-- Refused (55000) unless it is staging and its candidate slot is not in use.
CREATE OR REPLACE FUNCTION synchro.restart_bootstrap(id uuid)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.stream_reset;
    fresh uuid := gen_random_uuid();
BEGIN
    SELECT * INTO r FROM synchro.stream_reset x WHERE x.reset_id = id AND x.kind = 'bootstrap' FOR UPDATE;
    IF NOT FOUND OR r.phase <> 'staging' THEN
        RAISE EXCEPTION 'synchro: bootstrap % is not staging', id USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = r.candidate_slot AND s.active) THEN
        RAISE EXCEPTION 'synchro: the candidate slot % of bootstrap % is in use: stop its coordinator first', r.candidate_slot, id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM synchro.discard_generation(r.target_generation);
    DELETE FROM synchro.reset_coverage c WHERE c.reset_id = id;
    UPDATE synchro.stream_reset x
    SET candidate_slot = 'synchro_boot_' || left(replace(fresh::text, '-', ''), 20), target_generation = fresh,
        phase_at = now(), started_at = now()
    WHERE x.reset_id = id;
    -- Last: dropping a slot is not undone by a rollback.
    PERFORM pg_drop_replication_slot(s.slot_name) FROM pg_replication_slots s
    WHERE s.slot_name = r.candidate_slot AND s.database = current_database();
END
$$;
