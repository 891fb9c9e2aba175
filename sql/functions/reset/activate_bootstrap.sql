-- synchro.activate_bootstrap: activates registry change id (a bootstrap:
-- synchro.record_registry_change) in the capture worker's materialization,
-- right after its barrier transaction (commit position barrier: the
-- coordinator's barrier once the stage reached it, or for a change with
-- nothing to stage the changing transaction itself) materialized in the
-- active stream generation, before any later transaction: the active stream
-- is then exactly where the change belongs in source order. In that one
-- transaction:
--   * a reconfigured or unregistered table's open membership edges close at
--     the barrier;
--   * the staged projections of the change's relations replace the active
--     ones (a registration's were none; a reconfiguration's lacked columns);
--   * a reconfiguration's definition becomes the table's
--     (synchro.apply_table_definition);
--   * every live row of a registered or reconfigured table gets its version at
--     the barrier (after any of the barrier transaction's own events): a registered row its staged one (and the row head, when no
--     fence gave it one), a reconfigured row a new one where its wire image
--     changed (the row head moves to it unless a later write moved it), and
--     its membership edges from its table's rule over the active projections;
--   * every scope whose rows changed gets its digest and a scope floor at the
--     barrier (synchro.scope_floor: cursors issued before it put the scope in
--     rebuild); no effect is written, clients rebuild those scopes;
--   * an unregistered relation's projections, row heads, fences and
--     registration go;
--   * the relations stop being bootstrap_pending, the change is activated and
--     the schema manifest records the new registry.
-- Refused (55000) unless the change is ready at exactly this barrier.
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
    op text;
    rid bigint;
    tid integer;
    tables integer[];
    saved_work_mem text;
BEGIN
    SELECT * INTO r FROM synchro.stream_reset x WHERE x.reset_id = id AND x.kind = 'bootstrap' FOR UPDATE;
    IF NOT FOUND OR r.phase <> 'ready' OR r.barrier_commit_lsn <> barrier
       OR (r.barrier_commit_lsn IS NULL AND r.relation_ids <> '{}') THEN
        RAISE EXCEPTION 'synchro: registry change % is not ready at the barrier %', id, barrier
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM set_config('synchro.projection_generation', gen::text, true);
    op := r.registration ->> 'op';
    rid := coalesce((r.registration ->> 'relation_id')::bigint,
                    (SELECT t.relation_id FROM synchro.synced_table t WHERE t.table_id = (r.registration ->> 'table_id')::integer));
    tid := (SELECT t.table_id FROM synchro.synced_table t WHERE t.relation_id = rid);

    -- Edges that close: every open one of a reconfigured or unregistered table
    -- (one the barrier transaction itself opened is removed, not closed).
    CREATE TEMP TABLE synchro_boot_left ON COMMIT DROP AS
    SELECT m.scope, m.table_id, m.key, m.from_lsn FROM synchro.membership m
    WHERE m.stream_generation = gen AND m.table_id = tid AND m.to_lsn IS NULL AND op IN ('reconfigure', 'unregister');
    ALTER TABLE synchro_boot_left ADD COLUMN checksum bigint;
    UPDATE synchro_boot_left l
    SET checksum = (SELECT v.checksum FROM synchro.row_version v
                    WHERE v.table_id = l.table_id AND v.key = l.key AND v.stream_generation = gen
                    ORDER BY v.commit_lsn DESC, v.event_ordinal DESC LIMIT 1);
    UPDATE synchro.membership m SET to_lsn = barrier
    FROM synchro_boot_left l
    WHERE m.stream_generation = gen AND m.table_id = l.table_id AND m.key = l.key AND m.scope = l.scope AND m.to_lsn IS NULL
      AND l.from_lsn < barrier;
    DELETE FROM synchro.membership m USING synchro_boot_left l
    WHERE m.stream_generation = gen AND m.table_id = l.table_id AND m.key = l.key AND m.scope = l.scope AND m.from_lsn = barrier;

    -- The stage's projections become the active ones.
    IF r.relation_ids <> '{}' THEN
        DELETE FROM synchro.projection p WHERE p.stream_generation = gen AND p.relation_id = ANY (r.relation_ids);
        UPDATE synchro.projection p SET stream_generation = gen
        WHERE p.stream_generation = r.target_generation AND p.relation_id = ANY (r.relation_ids);
    END IF;
    IF op = 'reconfigure' THEN
        PERFORM synchro.apply_table_definition(tid, r.registration -> 'definition');
    END IF;

    -- The rows evaluated: their current version (the active one, else the
    -- staged one), their wire image under the table's definition, and the
    -- version they carry from the barrier on.
    tables := CASE op WHEN 'register' THEN ARRAY(SELECT t.table_id FROM synchro.synced_table t WHERE t.relation_id = ANY (r.relation_ids))
                      WHEN 'reconfigure' THEN ARRAY[tid] ELSE '{}' END;
    -- Set-based (each version set hashed once): the planner cannot know how
    -- many rows a stage or a table just reconfigured holds, and an index probe
    -- per row over a million-row table is what it would otherwise choose. Its
    -- joins and sorts get the memory of a million rows (the default spilled
    -- them to disk), and each row's version and checksum are computed in the
    -- same pass (an UPDATE after it rewrote every row of the table).
    PERFORM set_config('enable_nestloop', 'off', true);
    saved_work_mem := current_setting('work_mem');
    PERFORM set_config('work_mem', '128MB', true);
    CREATE TEMP TABLE synchro_boot_row ON COMMIT DROP AS
    SELECT b.*,
           CASE WHEN b.active_image IS NOT NULL AND b.active_image = b.wire THEN b.active_version
                WHEN b.active_version IS NULL AND b.staged_version IS NOT NULL THEN b.staged_version
                ELSE synchro.mint_version() END AS version,
           synchro.row_checksum(b.table_id, b.key, b.wire) AS checksum
    FROM (SELECT t.table_id, t.relation_id, p.key, p.image AS projected, t.scope_rule,
                 p.image - t.unsynced AS wire,
                 cur.version AS active_version, cur.image AS active_image, st.version AS staged_version
          -- The columns a table does not sync, once a table (OFFSET 0: not
          -- once a row).
          FROM (SELECT t.table_id, t.relation_id, t.scope_rule,
                       ARRAY(SELECT unnest(rel.columns)::text EXCEPT SELECT unnest(t.sync_columns)::text) AS unsynced
                FROM synchro.synced_table t
                JOIN synchro.relation rel ON rel.relation_id = t.relation_id
                WHERE t.table_id = ANY (tables) OFFSET 0) t
          JOIN synchro.projection p ON p.stream_generation = gen AND p.relation_id = t.relation_id
          LEFT JOIN (SELECT DISTINCT ON (v.table_id, v.key) v.table_id, v.key, v.version, v.image
                     FROM synchro.row_version v
                     WHERE v.stream_generation = gen AND v.table_id = ANY (tables) AND op = 'reconfigure'
                     ORDER BY v.table_id, v.key, v.commit_lsn DESC, v.event_ordinal DESC) cur
                 ON cur.table_id = t.table_id AND cur.key = p.key
          LEFT JOIN (SELECT DISTINCT ON (v.table_id, v.key) v.table_id, v.key, v.version
                     FROM synchro.row_version v
                     WHERE v.stream_generation = r.target_generation AND v.table_id = ANY (tables)
                     ORDER BY v.table_id, v.key, v.commit_lsn DESC, v.event_ordinal DESC) st
                 ON st.table_id = t.table_id AND st.key = p.key
          OFFSET 0) b;
    PERFORM set_config('enable_nestloop', 'on', true);
    PERFORM set_config('work_mem', saved_work_mem, true);
    INSERT INTO synchro.row_version (version, table_id, key, image, checksum, stream_generation, commit_lsn, event_ordinal)
    SELECT b.version, b.table_id, b.key, b.wire, b.checksum, gen, barrier, 2147483647
    FROM synchro_boot_row b WHERE b.version IS DISTINCT FROM b.active_version;
    -- The row head carries the version pushes compare with: a row no fence
    -- wrote gets one; a reconfigured row's moves unless a later write (a
    -- fence committed after the barrier) moved it already.
    INSERT INTO synchro.row_head (relation_id, key, version, fence_xid, fence_ctid, fence_ordinal)
    SELECT b.relation_id, b.key, b.version, pg_current_xact_id(), '(0,0)', 0 FROM synchro_boot_row b
    WHERE b.active_version IS NULL
    ON CONFLICT (relation_id, key) DO NOTHING;
    UPDATE synchro.row_head h SET version = b.version
    FROM synchro_boot_row b
    WHERE b.active_version IS NOT NULL AND b.version <> b.active_version
      AND h.relation_id = b.relation_id AND h.key = b.key AND h.version = b.active_version;

    CREATE TEMP TABLE synchro_boot_member ON COMMIT DROP AS
    SELECT s AS scope, b.table_id, b.key, b.checksum
    FROM synchro_boot_row b
    CROSS JOIN LATERAL synchro.scopes_of(b.scope_rule, b.key, b.projected, false) s;
    INSERT INTO synchro.membership (stream_generation, scope, table_id, key, from_lsn)
    SELECT gen, m.scope, m.table_id, m.key, barrier FROM synchro_boot_member m;

    -- Digests and floors of every scope whose rows changed.
    INSERT INTO synchro.scope_digest AS d (stream_generation, scope, commit_lsn, digest, row_count)
    SELECT gen, a.scope, barrier, ((coalesce(prev.digest, 0) + a.delta) % 4294967296 + 4294967296) % 4294967296,
           coalesce(prev.row_count, 0) + a.n
    FROM (SELECT c.scope, sum(c.checksum) AS delta, sum(c.n) AS n
          FROM (SELECT m.scope, m.checksum, 1 AS n FROM synchro_boot_member m
                UNION ALL
                SELECT l.scope, -l.checksum, -1 FROM synchro_boot_left l) c
          GROUP BY c.scope) a
    LEFT JOIN LATERAL (SELECT d.digest, d.row_count FROM synchro.scope_digest d
                       WHERE d.stream_generation = gen AND d.scope = a.scope AND d.commit_lsn <= barrier
                       ORDER BY d.commit_lsn DESC LIMIT 1) prev ON true
    ON CONFLICT (stream_generation, scope, commit_lsn) DO UPDATE SET digest = EXCLUDED.digest, row_count = EXCLUDED.row_count;
    INSERT INTO synchro.scope_floor (stream_generation, scope, floor_lsn)
    SELECT DISTINCT gen, s.scope, barrier
    FROM (SELECT m.scope FROM synchro_boot_member m UNION SELECT l.scope FROM synchro_boot_left l) s
    ON CONFLICT (stream_generation, scope) DO UPDATE SET floor_lsn = greatest(synchro.scope_floor.floor_lsn, EXCLUDED.floor_lsn);

    IF op = 'unregister' THEN
        DELETE FROM synchro.projection p WHERE p.relation_id = rid;
        DELETE FROM synchro.row_head h WHERE h.relation_id = rid;
        DELETE FROM synchro.fence f WHERE f.relation_id = rid;
        DELETE FROM synchro.relation_partition x WHERE x.relation_id = rid;
        DELETE FROM synchro.relation_enum_label x WHERE x.relation_id = rid;
        DELETE FROM synchro.write_policy x WHERE x.table_id = tid;
        DELETE FROM synchro.synced_table x WHERE x.relation_id = rid;
        DELETE FROM synchro.relation x WHERE x.relation_id = rid;
    END IF;

    UPDATE synchro.relation x SET bootstrap_pending = false WHERE x.relation_id = ANY (r.relation_ids);
    UPDATE synchro.stream_reset x
    SET phase = 'activated', phase_at = now(), activated_at = now(), activated_by = session_user,
        barrier_commit_lsn = barrier,
        verification = coalesce(x.verification, '{}') || jsonb_build_object(
            'rows', (SELECT count(*) FROM synchro_boot_row),
            'new_versions', (SELECT count(*) FROM synchro_boot_row b WHERE b.version IS DISTINCT FROM b.active_version),
            'memberships_opened', (SELECT count(*) FROM synchro_boot_member),
            'memberships_closed', (SELECT count(*) FROM synchro_boot_left),
            'scopes', (SELECT count(*) FROM (SELECT m.scope FROM synchro_boot_member m UNION SELECT l.scope FROM synchro_boot_left l) s))
    WHERE x.reset_id = id;
    DROP TABLE synchro_boot_left, synchro_boot_row, synchro_boot_member;
    PERFORM synchro.current_schema();
    -- Every waiting pull answers again: the manifest and scope floors moved.
    PERFORM synchro.notify_changes(NULL);
END
$$;
