-- synchro.reset_status (a view): every stream reset and projection bootstrap
-- (kind, the relations a bootstrap stages and the registry change it
-- activates: op, relation, table_id, definition) with its phase, positions,
-- counters and the candidate slot's state (synchro.slot_state),
-- for operators (synchroctl reset status). distance_bytes is how far the staged catch-up is behind its barrier
-- (before a barrier: behind the current WAL position).
CREATE OR REPLACE VIEW synchro.reset_status AS
SELECT r.reset_id, r.phase, r.reason, r.candidate_slot,
       CASE WHEN r.phase IN ('retired', 'aborted') THEN 'dropped' ELSE synchro.slot_state(r.candidate_slot) END AS slot_state,
       r.source_generation, r.target_generation, r.consistent_point, r.barrier_end_lsn,
       r.processed_end_lsn AS staged_through,
       CASE WHEN r.phase = 'catching_up'
            THEN pg_wal_lsn_diff(coalesce(r.barrier_end_lsn, pg_current_wal_lsn()), r.processed_end_lsn) END AS distance_bytes,
       r.relations_staged, r.rows_staged, r.fences_covered, r.txns_caught_up,
       r.started_at, r.phase_at, r.activated_at, r.retired_at, r.aborted_at, r.retirement,
       r.kind, r.relation_ids, r.registration
FROM synchro.stream_reset r;
