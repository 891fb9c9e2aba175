-- synchro.stage_baseline: completes a reset's staged baseline in the
-- transaction that imported the candidate slot's exported snapshot (named
-- snapshot_name, taken at the slot's consistent_point: one source boundary,
-- every transaction committed before it in the snapshot, every later one
-- decoded from the slot), after the coordinator copied every registered
-- relation's rows into the target generation's projections (rendered as the
-- worker renders decoded rows). It records the boundary (the baseline's
-- position is just before the consistent point; the staged stream starts
-- processed and acknowledged at it) and evaluates, with the code materialization uses, over the staged projections:
-- the final source-owned version of every synced row (its row head's: the last
-- fence of the row in the snapshot), with its wire image and row checksum
-- (synchro.row_checksum); a deletion version for a row whose head is a delete;
-- no row and no version for a row absent from the snapshot whose head is not a
-- delete (after a TRUNCATE); membership edges from the rules
-- (synchro.scopes_of) and each scope's digest, all at the baseline position;
-- and a reset_baseline coverage record for every accepted fence the snapshot
-- holds. Nothing of it creates an event or an effect. It refuses (55000) a
-- synced row without a row head (written before registration: issue a
-- bootstrap) and a reset not staging, and moves the reset to catching_up.
DROP FUNCTION IF EXISTS synchro.stage_baseline(uuid);
CREATE OR REPLACE FUNCTION synchro.stage_baseline(id uuid, consistent_point pg_lsn, snapshot_name text)
RETURNS synchro.stream_reset
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
SET synchro.rule_reads = 'projections'
AS $$
DECLARE
    r synchro.stream_reset;
    headless bigint;
    nestloop text := current_setting('enable_nestloop');
BEGIN
    SELECT * INTO r FROM synchro.stream_reset WHERE reset_id = id FOR UPDATE;
    IF NOT FOUND OR r.phase <> 'staging' THEN
        RAISE EXCEPTION 'synchro: reset % is not staging', id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    r.consistent_point := stage_baseline.consistent_point;
    r.baseline_lsn := stage_baseline.consistent_point - 1;
    PERFORM set_config('synchro.projection_generation', r.target_generation::text, true);

    -- The target generation is new to the planner's statistics, so its rows
    -- are estimated at one and the joins over them planned as nested loops:
    -- over a million-row baseline an index probe per row. The joins that call
    -- no rule code are planned without nested loops (set locally, reset
    -- before the membership rules run).
    PERFORM set_config('enable_nestloop', 'off', true);
    SELECT count(*) INTO headless
    FROM synchro.synced_table t
    JOIN synchro.projection p ON p.relation_id = t.relation_id AND p.stream_generation = r.target_generation
    WHERE NOT EXISTS (SELECT FROM synchro.row_head h WHERE h.relation_id = t.relation_id AND h.key = p.key);
    IF headless > 0 THEN
        RAISE EXCEPTION 'synchro: % synced rows have no version (written before their table was registered); a reset cannot stage them', headless
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    -- Versions: live rows at their head's version; deleted rows' deletion versions.
    -- A table's unsynced columns are computed once per table (MATERIALIZED),
    -- and a row's wire image once per row (OFFSET 0 keeps the subquery from
    -- being flattened into the checksum's argument).
    INSERT INTO synchro.row_version (version, table_id, key, image, checksum, stream_generation, commit_lsn, event_ordinal)
    WITH tables AS MATERIALIZED (
        SELECT t.table_id, t.relation_id,
               ARRAY(SELECT unnest(rel.columns)::text EXCEPT SELECT unnest(t.sync_columns)::text) AS unsynced
        FROM synchro.synced_table t
        JOIN synchro.relation rel ON rel.relation_id = t.relation_id)
    SELECT w.version, w.table_id, w.key, w.wire, synchro.row_checksum(w.table_id, w.key, w.wire), r.target_generation, r.baseline_lsn, 0
    FROM (SELECT h.version, t.table_id, h.key, p.image - t.unsynced AS wire
          FROM tables t
          JOIN synchro.row_head h ON h.relation_id = t.relation_id
          LEFT JOIN synchro.projection p ON p.relation_id = t.relation_id AND p.key = h.key AND p.stream_generation = r.target_generation
          WHERE p.key IS NOT NULL OR h.fence_ctid IS NULL
          OFFSET 0) w;

    PERFORM set_config('enable_nestloop', nestloop, true);

    -- Membership edges and scope digests at the baseline position.
    INSERT INTO synchro.membership (stream_generation, scope, table_id, key, from_lsn)
    SELECT r.target_generation, s, t.table_id, p.key, r.baseline_lsn
    FROM synchro.synced_table t
    JOIN synchro.projection p ON p.relation_id = t.relation_id AND p.stream_generation = r.target_generation
    CROSS JOIN LATERAL synchro.scopes_of(t.scope_rule, p.key, p.image, false) s;
    PERFORM set_config('enable_nestloop', 'off', true);
    INSERT INTO synchro.scope_digest (stream_generation, scope, commit_lsn, digest, row_count)
    SELECT r.target_generation, m.scope, r.baseline_lsn, sum(v.checksum) % 4294967296, count(*)
    FROM synchro.membership m
    JOIN synchro.row_version v ON v.stream_generation = m.stream_generation AND v.table_id = m.table_id AND v.key = m.key
    WHERE m.stream_generation = r.target_generation
    GROUP BY m.scope;

    PERFORM set_config('enable_nestloop', nestloop, true);

    -- reset_baseline coverage of every fence in the snapshot.
    INSERT INTO synchro.reset_coverage (reset_id, fence_id, candidate_slot, consistent_point, target_generation)
    SELECT r.reset_id, f.fence_id, r.candidate_slot, r.consistent_point, r.target_generation FROM synchro.fence f;

    UPDATE synchro.stream_reset x
    SET phase = 'catching_up', phase_at = now(), baseline_at = now(),
        consistent_point = r.consistent_point, snapshot_name = stage_baseline.snapshot_name, baseline_lsn = r.baseline_lsn,
        processed_end_lsn = r.consistent_point, acknowledged_end_lsn = r.consistent_point,
        registry_generation = (SELECT max(g.generation) FROM synchro.registry_generation g),
        relations_staged = (SELECT count(DISTINCT p.relation_id) FROM synchro.projection p WHERE p.stream_generation = r.target_generation),
        rows_staged = (SELECT count(*) FROM synchro.projection p WHERE p.stream_generation = r.target_generation),
        fences_covered = (SELECT count(*) FROM synchro.reset_coverage c WHERE c.reset_id = r.reset_id)
    WHERE x.reset_id = id
    RETURNING * INTO r;
    RETURN r;
END
$$;
