-- synchro.stage_baseline: completes a reset's staged baseline in the
-- transaction that imported the candidate slot's exported snapshot, once the
-- coordinator recorded its boundary (synchro.begin_baseline), copied every
-- registered relation's rows into the target generation's projections
-- (rendered as the worker renders decoded rows) and staged every synced row's
-- version and membership edges (synchro.stage_synced_rows). It adds a
-- deletion version for each synced row whose head is a delete (a row absent
-- from the snapshot whose head is not a delete, after a TRUNCATE, gets no row
-- and no version), each scope's digest at the baseline position, and a
-- reset_baseline coverage record for every accepted fence the snapshot holds;
-- nothing of it creates an event or an effect. A bootstrap's stage needs no
-- deletion versions or digests (its rows were never served), and covers the
-- fences of its own relations only. It moves the reset to catching_up.
-- Refused (55000) for a reset not staging with a boundary.
DROP FUNCTION IF EXISTS synchro.stage_baseline(uuid, pg_lsn, text);
CREATE OR REPLACE FUNCTION synchro.stage_baseline(id uuid)
RETURNS synchro.stream_reset
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
-- The target generation is new to the planner's statistics, so its rows are
-- estimated at one and joins over them planned as nested loops: over a
-- million-row baseline an index probe per row. Nothing here calls rule code.
SET enable_nestloop = off
AS $$
DECLARE
    r synchro.stream_reset;
BEGIN
    SELECT * INTO r FROM synchro.stream_reset WHERE reset_id = id FOR UPDATE;
    IF NOT FOUND OR r.phase <> 'staging' OR r.baseline_lsn IS NULL THEN
        RAISE EXCEPTION 'synchro: reset % is not staging with a boundary', id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    IF r.kind = 'reset' THEN
        INSERT INTO synchro.row_version (version, table_id, key, image, checksum, stream_generation, commit_lsn, event_ordinal)
        SELECT h.version, t.table_id, h.key, NULL, synchro.row_checksum(t.table_id, h.key, NULL), r.target_generation, r.baseline_lsn, 0
        FROM synchro.synced_table t
        JOIN synchro.row_head h ON h.relation_id = t.relation_id
        WHERE h.fence_ctid IS NULL;

        INSERT INTO synchro.scope_digest (stream_generation, scope, commit_lsn, digest, row_count)
        SELECT r.target_generation, m.scope, r.baseline_lsn, sum(v.checksum) % 4294967296, count(*)
        FROM synchro.membership m
        JOIN synchro.row_version v ON v.stream_generation = m.stream_generation AND v.table_id = m.table_id AND v.key = m.key
        WHERE m.stream_generation = r.target_generation
        GROUP BY m.scope;

        INSERT INTO synchro.reset_coverage (reset_id, fence_id, candidate_slot, consistent_point, target_generation)
        SELECT r.reset_id, f.fence_id, r.candidate_slot, r.consistent_point, r.target_generation FROM synchro.fence f;
    ELSE
        INSERT INTO synchro.reset_coverage (reset_id, fence_id, candidate_slot, consistent_point, target_generation)
        SELECT r.reset_id, f.fence_id, r.candidate_slot, r.consistent_point, r.target_generation
        FROM synchro.fence f WHERE f.relation_id = ANY (r.relation_ids);
    END IF;

    UPDATE synchro.stream_reset x
    SET phase = 'catching_up', phase_at = now(), baseline_at = now(),
        registry_generation = (SELECT max(g.generation) FROM synchro.registry_generation g),
        relations_staged = (SELECT count(DISTINCT p.relation_id) FROM synchro.projection p WHERE p.stream_generation = r.target_generation),
        rows_staged = (SELECT count(*) FROM synchro.projection p WHERE p.stream_generation = r.target_generation),
        fences_covered = (SELECT count(*) FROM synchro.reset_coverage c WHERE c.reset_id = r.reset_id)
    WHERE x.reset_id = id
    RETURNING * INTO r;
    RETURN r;
END
$$;
