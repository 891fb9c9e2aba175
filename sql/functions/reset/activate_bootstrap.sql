-- synchro.activate_bootstrap: activates bootstrap id in the capture worker's
-- materialization, right after the bootstrap's barrier transaction (commit
-- position barrier) materialized in the active stream generation, before any
-- later transaction: the active stream is then exactly at the position the
-- stage caught up to. In that one transaction the staged projections of the
-- bootstrap's relations become the active ones; every live synced row of them
-- gets its current staged version at the barrier (and the row head, when no
-- fence gave it one: a row written before registration and not since), its
-- membership edges from its table's rule over the active projections (from
-- the barrier on), each scope it joins its digest at the barrier and a scope
-- floor there (synchro.scope_floor: cursors issued before it put the scope in
-- rebuild); the relations stop being bootstrap_pending and the schema
-- manifest records their tables. No effect is written: clients get the rows
-- by rebuilding those scopes. Refused (55000) unless the bootstrap is ready
-- with exactly this barrier.
CREATE OR REPLACE FUNCTION synchro.activate_bootstrap(id uuid, barrier pg_lsn)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
SET synchro.rule_reads = 'projections'
AS $$
DECLARE
    r synchro.stream_reset;
    gen uuid := (SELECT p.stream_generation FROM synchro.progress p);
    tables integer[];
    moved bigint;
BEGIN
    SELECT * INTO r FROM synchro.stream_reset x WHERE x.reset_id = id AND x.kind = 'bootstrap' FOR UPDATE;
    IF NOT FOUND OR r.phase <> 'ready' OR r.barrier_commit_lsn IS DISTINCT FROM barrier THEN
        RAISE EXCEPTION 'synchro: bootstrap % is not ready at the barrier %', id, barrier
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM set_config('synchro.projection_generation', gen::text, true);
    tables := ARRAY(SELECT t.table_id FROM synchro.synced_table t WHERE t.relation_id = ANY (r.relation_ids));

    UPDATE synchro.projection p SET stream_generation = gen
    WHERE p.stream_generation = r.target_generation AND p.relation_id = ANY (r.relation_ids);
    GET DIAGNOSTICS moved = ROW_COUNT;

    CREATE TEMP TABLE synchro_boot_row ON COMMIT DROP AS
    SELECT v.table_id, t.relation_id, v.key, v.version, v.image, v.checksum, p.image AS projected, t.scope_rule
    FROM (SELECT DISTINCT ON (v.table_id, v.key) v.table_id, v.key, v.version, v.image, v.checksum
          FROM synchro.row_version v
          WHERE v.stream_generation = r.target_generation AND v.table_id = ANY (tables)
          ORDER BY v.table_id, v.key, v.commit_lsn DESC, v.event_ordinal DESC) v
    JOIN synchro.synced_table t ON t.table_id = v.table_id
    JOIN synchro.projection p ON p.stream_generation = gen AND p.relation_id = t.relation_id AND p.key = v.key
    WHERE v.image IS NOT NULL;

    INSERT INTO synchro.row_version (version, table_id, key, image, checksum, stream_generation, commit_lsn, event_ordinal)
    SELECT b.version, b.table_id, b.key, b.image, b.checksum, gen, barrier, 0 FROM synchro_boot_row b;
    -- A row head exists for every row some fence wrote; a later fence (a
    -- write committed after the barrier) keeps its own.
    INSERT INTO synchro.row_head (relation_id, key, version, fence_xid, fence_ctid, fence_ordinal)
    SELECT b.relation_id, b.key, b.version, pg_current_xact_id(), '(0,0)', 0 FROM synchro_boot_row b
    ON CONFLICT (relation_id, key) DO NOTHING;

    CREATE TEMP TABLE synchro_boot_member ON COMMIT DROP AS
    SELECT s AS scope, b.table_id, b.key, b.checksum
    FROM synchro_boot_row b
    CROSS JOIN LATERAL synchro.scopes_of(b.scope_rule, b.key, b.projected, false) s;
    INSERT INTO synchro.membership (stream_generation, scope, table_id, key, from_lsn)
    SELECT gen, m.scope, m.table_id, m.key, barrier FROM synchro_boot_member m;

    INSERT INTO synchro.scope_digest (stream_generation, scope, commit_lsn, digest, row_count)
    SELECT gen, a.scope, barrier, (coalesce(prev.digest, 0) + a.digest) % 4294967296, coalesce(prev.row_count, 0) + a.n
    FROM (SELECT m.scope, sum(m.checksum) % 4294967296 AS digest, count(*) AS n FROM synchro_boot_member m GROUP BY m.scope) a
    LEFT JOIN LATERAL (SELECT d.digest, d.row_count FROM synchro.scope_digest d
                       WHERE d.stream_generation = gen AND d.scope = a.scope
                       ORDER BY d.commit_lsn DESC LIMIT 1) prev ON true;
    INSERT INTO synchro.scope_floor (stream_generation, scope, floor_lsn)
    SELECT DISTINCT gen, m.scope, barrier FROM synchro_boot_member m
    ON CONFLICT (stream_generation, scope) DO UPDATE SET floor_lsn = greatest(synchro.scope_floor.floor_lsn, EXCLUDED.floor_lsn);

    UPDATE synchro.relation x SET bootstrap_pending = false WHERE x.relation_id = ANY (r.relation_ids);
    UPDATE synchro.stream_reset x
    SET phase = 'activated', phase_at = now(), activated_at = now(), activated_by = session_user,
        verification = coalesce(x.verification, '{}') || jsonb_build_object(
            'activated_rows', moved, 'synced_rows', (SELECT count(*) FROM synchro_boot_row),
            'scopes', (SELECT count(DISTINCT m.scope) FROM synchro_boot_member m))
    WHERE x.reset_id = id;
    DROP TABLE synchro_boot_row, synchro_boot_member;
    PERFORM synchro.current_schema();
END
$$;
