-- synchro.begin_reset: records a new stream reset in phase staging, naming its
-- candidate slot before the slot exists (so that a coordinator that dies after
-- creating it leaves a slot the reset's record names). From this commit on
-- the active stream is held blocked (synchro.materialize_transaction refuses
-- it): the old stream's materialized high-watermark is recorded under the
-- progress row's lock, and activation requires it unchanged. One reset at a
-- time: refused (55000) while another is staging, catching up or ready, while
-- a projection bootstrap is pending, and without a stream.
CREATE OR REPLACE FUNCTION synchro.begin_reset(reason text)
RETURNS synchro.stream_reset
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    prog synchro.progress := synchro.stream_progress(NULL, true);
    r synchro.stream_reset;
    id uuid := gen_random_uuid();
BEGIN
    IF EXISTS (SELECT FROM synchro.stream_reset x WHERE x.phase IN ('staging', 'catching_up', 'ready') AND x.kind = 'reset') THEN
        RAISE EXCEPTION 'synchro: another stream reset is in progress: resume it (synchroctl reset start) or abort it (synchroctl reset abort)'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF EXISTS (SELECT FROM synchro.relation x WHERE x.bootstrap_pending)
       OR EXISTS (SELECT FROM synchro.stream_reset x WHERE x.phase IN ('staging', 'catching_up', 'ready') AND x.kind = 'bootstrap') THEN
        RAISE EXCEPTION 'synchro: a projection bootstrap or registry change is pending: a reset can begin once it is activated (synchroctl reset status)'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO synchro.stream_reset (reset_id, reason, candidate_slot, source_generation, source_slot, source_commit_lsn)
    VALUES (id, coalesce(nullif(left(reason, 200), ''), 'operator reset'), 'synchro_reset_' || left(replace(id::text, '-', ''), 20),
            prog.stream_generation, prog.slot_name, prog.materialized_commit_lsn)
    RETURNING * INTO r;
    RETURN r;
END
$$;
