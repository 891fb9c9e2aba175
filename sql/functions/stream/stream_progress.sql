-- synchro.stream_progress: the progress of the stream a worker session
-- materializes: the active stream's (synchro.progress) when staged is NULL,
-- else that of the reset whose target generation is staged, in the same shape
-- (its generation_start is the baseline's position); with lock, the row it
-- comes from is locked for the caller's transaction. A stage that is not
-- catching up is refused (55000): only its staged catch-up materializes it.
DROP FUNCTION IF EXISTS synchro.stream_progress(uuid, boolean);
CREATE OR REPLACE FUNCTION synchro.stream_progress(staged uuid, lock boolean DEFAULT false)
RETURNS synchro.progress
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    prog synchro.progress;
    r synchro.stream_reset;
BEGIN
    IF staged IS NULL THEN
        IF lock THEN
            SELECT * INTO prog FROM synchro.progress FOR UPDATE;
        ELSE
            SELECT * INTO prog FROM synchro.progress;
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'synchro: no stream: the worker has not started a stream generation'
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        RETURN prog;
    END IF;
    IF lock THEN
        SELECT * INTO r FROM synchro.stream_reset WHERE target_generation = staged FOR UPDATE;
    ELSE
        SELECT * INTO r FROM synchro.stream_reset WHERE target_generation = staged;
    END IF;
    IF NOT FOUND OR r.phase <> 'catching_up' THEN
        RAISE EXCEPTION 'synchro: stream generation % is not a reset stage catching up', staged
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    prog.singleton := true;
    prog.stream_generation := r.target_generation;
    prog.slot_name := r.candidate_slot;
    prog.database_name := r.database_name;
    prog.generation_start_lsn := r.baseline_lsn;
    prog.materialized_commit_lsn := r.materialized_commit_lsn;
    prog.materialized_end_lsn := r.materialized_end_lsn;
    prog.materialized_commit_time := r.materialized_commit_time;
    prog.processed_end_lsn := r.processed_end_lsn;
    prog.acknowledged_end_lsn := r.acknowledged_end_lsn;
    prog.registry_generation := r.registry_generation;
    prog.updated_at := r.phase_at;
    RETURN prog;
END
$$;
