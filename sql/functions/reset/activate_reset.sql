-- synchro.activate_reset: activates a ready reset in one transaction (the
-- caller's), refused (55000, nothing changed) unless: the stage is verified;
-- the candidate slot is a permanent logical slot of this database that can be
-- streamed (synchro.slot_problem) and the staged stream acknowledged it
-- through the barrier with nothing after it processed (no gap); every fence
-- committed before the barrier (visible in the barrier's snapshot) is either
-- WAL-materialized in the stage or covered by the reset's baseline; and the
-- old stream is still blocked (its generation and materialized position as
-- when the reset began). It then installs the staged state: synchro.progress
-- names the target generation and the candidate slot; the generation starts
-- at the baseline's position (just before the slot's consistent point, where
-- the slot's history begins: a slot position that a crash sets back is never
-- before it), and its high-watermark is the barrier transaction's commit (the
-- complete baseline through the barrier: no cursor of the generation is
-- before it), with its end as the processed and acknowledged boundary; the
-- stage's catch-up effects are removed (they were never exposed), and its
-- ledger is left to history pruning (synchro.prune_capture_history); the fences
-- the stage materialized or covered stop holding their clients' pulls; the
-- old generation's poison records are resolved. Every cursor and rebuild
-- session of the old generation no longer resumes (they are bound to it).
CREATE OR REPLACE FUNCTION synchro.activate_reset(id uuid)
RETURNS synchro.stream_reset
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    prog synchro.progress := synchro.stream_progress(NULL, true);
    r synchro.stream_reset;
    problem text;
    confirmed pg_lsn;
    uncovered bigint;
BEGIN
    SELECT * INTO r FROM synchro.stream_reset WHERE reset_id = id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: no reset %', id USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF r.phase <> 'ready' OR r.verified_at IS NULL THEN
        RAISE EXCEPTION 'synchro: reset % is %, not ready: it activates once staged, caught up to its barrier and verified', id, r.phase
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF prog.stream_generation <> r.source_generation OR prog.materialized_commit_lsn IS DISTINCT FROM r.source_commit_lsn THEN
        RAISE EXCEPTION 'synchro: the stream moved since reset % began (it must stay blocked): abort the reset', id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT x.problem, x.confirmed_flush_lsn INTO problem, confirmed FROM synchro.slot_problem(r.candidate_slot) x;
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: reset % cannot activate: %; abort the reset and start again', id, problem
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF r.acknowledged_end_lsn IS DISTINCT FROM r.barrier_end_lsn OR r.processed_end_lsn IS DISTINCT FROM r.barrier_end_lsn
       OR confirmed > r.barrier_end_lsn THEN
        RAISE EXCEPTION 'synchro: the candidate slot of reset % is not acknowledged exactly through its barrier', id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT count(*) INTO uncovered
    FROM synchro.fence f
    WHERE pg_visible_in_snapshot(f.xid, r.barrier_snapshot)
      AND NOT EXISTS (SELECT FROM synchro.reset_coverage c WHERE c.fence_id = f.fence_id AND c.reset_id = r.reset_id)
      AND NOT EXISTS (SELECT FROM synchro.event_ledger l WHERE l.fence_id = f.fence_id AND l.stream_generation = r.target_generation);
    IF uncovered > 0 THEN
        RAISE EXCEPTION 'synchro: % fences committed before the barrier of reset % are neither materialized in its stage nor covered by its baseline', uncovered, id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    UPDATE synchro.progress
    SET stream_generation = r.target_generation, slot_name = r.candidate_slot,
        generation_start_lsn = r.baseline_lsn, materialized_commit_lsn = r.barrier_commit_lsn,
        materialized_end_lsn = r.barrier_end_lsn, materialized_commit_time = r.materialized_commit_time,
        processed_end_lsn = r.barrier_end_lsn, acknowledged_end_lsn = r.barrier_end_lsn,
        registry_generation = r.registry_generation, caught_up_at = now(), updated_at = now();
    DELETE FROM synchro.effect e WHERE e.stream_generation = r.target_generation;
    -- The stage's ledger lies before the generation start: history pruning
    -- of the new generation starts at the baseline, so it prunes it too.
    INSERT INTO synchro.capture_history (stream_generation, pruned_commit_lsn) VALUES (r.target_generation, r.baseline_lsn);
    DELETE FROM synchro.fence_pending p
    WHERE EXISTS (SELECT FROM synchro.reset_coverage c WHERE c.fence_id = p.fence_id AND c.reset_id = r.reset_id)
       OR EXISTS (SELECT FROM synchro.event_ledger l WHERE l.fence_id = p.fence_id AND l.stream_generation = r.target_generation);
    UPDATE synchro.poison_txn SET resolved_at = now() WHERE stream_generation = r.source_generation AND resolved_at IS NULL;
    UPDATE synchro.stream_reset x
    SET phase = 'activated', phase_at = now(), activated_at = now(), activated_by = session_user
    WHERE x.reset_id = id
    RETURNING * INTO r;
    -- Every waiting pull answers again: its cursor is now of an old generation.
    PERFORM synchro.notify_changes(NULL);
    RETURN r;
END
$$;
