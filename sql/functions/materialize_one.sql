-- synchro.materialize_one: the body of synchro.materialize_transaction for one
-- source transaction whose ledger row was just written: event ledger,
-- projections, impacted-row evaluation against the final projected state, row
-- versions, membership edges, net effects with deterministic effect ordinals,
-- scope digests and fence reconciliation, all at position commit_at.
CREATE OR REPLACE FUNCTION synchro.materialize_one(gen uuid, commit_at pg_lsn, events jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reconciled integer;
BEGIN
    DELETE FROM synchro_change;
    DELETE FROM synchro_impact;
    DELETE FROM synchro_scope;
    DELETE FROM synchro_diff;
    IF jsonb_array_length(events) = 0 THEN
        RETURN;
    END IF;

    INSERT INTO synchro.event_ledger (stream_generation, commit_lsn, event_ordinal, relation_id, op, key, fence_id, version)
    SELECT gen, commit_at, e.o, e.r, e.op, e.k, e.f, e.v
    FROM jsonb_to_recordset(events) AS e(o integer, r bigint, op text, k text, f uuid, v text);

    -- Fence reconciliation: every paired fence is marked materialized here.
    UPDATE synchro.fence f SET materialized_lsn = commit_at
    FROM jsonb_to_recordset(events) AS e(f uuid)
    WHERE f.fence_id = e.f AND f.materialized_lsn IS NULL;
    GET DIAGNOSTICS reconciled = ROW_COUNT;
    IF reconciled <> jsonb_array_length(events) THEN
        RAISE EXCEPTION 'synchro: % of % fences of transaction % are not recorded or already materialized',
            jsonb_array_length(events) - reconciled, jsonb_array_length(events), commit_at
            USING ERRCODE = 'data_corrupted';
    END IF;

    -- Net change per row: the last event's image over the projection before the
    -- transaction (a partial image lacks unchanged TOAST values).
    INSERT INTO synchro_change (relation_id, key, old_image, new_image, event_ordinal, version)
    SELECT l.r, l.k, p.image,
           CASE WHEN l.op = 'delete' THEN NULL
                WHEN l.partial THEN coalesce(p.image, '{}') || l.img
                ELSE l.img END,
           l.o, l.v
    FROM (SELECT DISTINCT ON (e.r, e.k) e.*
          FROM jsonb_to_recordset(events) AS e(o integer, r bigint, k text, op text, img jsonb, partial boolean, v text)
          ORDER BY e.r, e.k, e.o DESC) l
    LEFT JOIN synchro.projection p ON p.relation_id = l.r AND p.key = l.k;

    DELETE FROM synchro.projection p USING synchro_change c
    WHERE c.new_image IS NULL AND p.relation_id = c.relation_id AND p.key = c.key;
    INSERT INTO synchro.projection (relation_id, key, image)
    SELECT c.relation_id, c.key, c.new_image FROM synchro_change c WHERE c.new_image IS NOT NULL
    ON CONFLICT (relation_id, key) DO UPDATE SET image = EXCLUDED.image;

    -- Impacted synced rows: their own changes, then rows whose rules read a changed relation.
    INSERT INTO synchro_impact (table_id, key, key_num, event_ordinal, own, version, image)
    SELECT t.table_id, c.key, CASE WHEN r.key_type <> 'string' THEN c.key::numeric END,
           c.event_ordinal, true, c.version, c.new_image
    FROM synchro_change c
    JOIN synchro.synced_table t ON t.relation_id = c.relation_id
    JOIN synchro.relation r ON r.relation_id = c.relation_id;

    INSERT INTO synchro_impact (table_id, key, key_num, event_ordinal, own)
    SELECT rr.table_id, k, CASE WHEN r.key_type <> 'string' THEN k::numeric END, max(c.event_ordinal), false
    FROM synchro_change c
    JOIN synchro.rule_read rr ON rr.relation_id = c.relation_id
    JOIN synchro.synced_table t ON t.table_id = rr.table_id
    JOIN synchro.relation r ON r.relation_id = t.relation_id
    CROSS JOIN LATERAL synchro.impacted_keys(rr.table_id, c.relation_id, c.key, c.old_image, c.new_image) k
    GROUP BY rr.table_id, k, r.key_type
    ON CONFLICT (table_id, key) DO UPDATE SET event_ordinal = greatest(synchro_impact.event_ordinal, EXCLUDED.event_ordinal);

    UPDATE synchro_impact i
    SET image = (SELECT p.image FROM synchro.projection p JOIN synchro.synced_table t ON t.relation_id = p.relation_id
                 WHERE t.table_id = i.table_id AND p.key = i.key),
        version = (SELECT s.version FROM synchro.synced_row s WHERE s.table_id = i.table_id AND s.key = i.key)
    WHERE NOT i.own;
    DELETE FROM synchro_impact i WHERE NOT i.own AND i.version IS NULL;

    -- New immutable versions of changed synced rows (wire image: synced columns only).
    INSERT INTO synchro.row_version (version, table_id, key, image, checksum, stream_generation, commit_lsn, event_ordinal)
    SELECT i.version, i.table_id, i.key, w.wire, synchro.row_checksum(i.table_id, i.key, w.wire), gen, commit_at, i.event_ordinal
    FROM synchro_impact i
    JOIN synchro.synced_table t ON t.table_id = i.table_id
    JOIN synchro.relation r ON r.relation_id = t.relation_id
    CROSS JOIN LATERAL (SELECT i.image - ARRAY(SELECT unnest(r.columns)::text EXCEPT SELECT unnest(t.sync_columns)::text) AS wire) w
    WHERE i.own;
    UPDATE synchro_impact i SET checksum = v.checksum FROM synchro.row_version v WHERE v.version = i.version;

    -- Scopes at the final projected state.
    INSERT INTO synchro_scope (table_id, key, scope)
    SELECT i.table_id, i.key, s FROM synchro_impact i CROSS JOIN LATERAL synchro.scopes_of(i.table_id, i.key, i.image) s
    WHERE i.image IS NOT NULL;

    -- Net membership change per (scope, row) against the open edges.
    INSERT INTO synchro_diff (scope, table_id, key, op, version, joined, left_scope, delta)
    SELECT coalesce(n.scope, o.scope), coalesce(n.table_id, o.table_id), coalesce(n.key, o.key),
           CASE WHEN n.scope IS NULL THEN 'delete' ELSE 'upsert' END,
           n.version, o.scope IS NULL, n.scope IS NULL,
           coalesce(n.checksum, 0) - coalesce(o.checksum, 0)
    FROM (SELECT m.scope, m.table_id, m.key, s.version, s.checksum
          FROM synchro_impact i
          JOIN synchro.membership m ON m.stream_generation = gen AND m.table_id = i.table_id AND m.key = i.key AND m.to_lsn IS NULL
          JOIN synchro.synced_row s ON s.table_id = i.table_id AND s.key = i.key) o
    FULL JOIN (SELECT sc.scope, sc.table_id, sc.key, i.version, i.checksum
               FROM synchro_scope sc JOIN synchro_impact i ON i.table_id = sc.table_id AND i.key = sc.key) n
        ON n.scope = o.scope AND n.table_id = o.table_id AND n.key = o.key
    WHERE n.scope IS NULL OR o.scope IS NULL OR n.version IS DISTINCT FROM o.version;

    INSERT INTO synchro.effect (stream_generation, scope, commit_lsn, event_ordinal, effect_ordinal, table_id, key, op, version)
    SELECT gen, d.scope, commit_at, i.event_ordinal,
           row_number() OVER (PARTITION BY d.scope, i.event_ordinal
                              ORDER BY d.table_id, i.key_num, d.key COLLATE "C", d.op = 'upsert') - 1,
           d.table_id, d.key, d.op, d.version
    FROM synchro_diff d JOIN synchro_impact i ON i.table_id = d.table_id AND i.key = d.key;

    UPDATE synchro.membership m SET to_lsn = commit_at
    FROM synchro_diff d
    WHERE d.left_scope AND m.stream_generation = gen AND m.scope = d.scope AND m.table_id = d.table_id
      AND m.key = d.key AND m.to_lsn IS NULL;
    INSERT INTO synchro.membership (stream_generation, scope, table_id, key, from_lsn)
    SELECT gen, d.scope, d.table_id, d.key, commit_at FROM synchro_diff d WHERE d.joined;

    INSERT INTO synchro.scope_digest (stream_generation, scope, commit_lsn, digest, row_count)
    SELECT gen, d.scope, commit_at,
           (((coalesce(prev.digest, 0) + sum(d.delta)) % 4294967296) + 4294967296) % 4294967296,
           coalesce(prev.row_count, 0) + count(*) FILTER (WHERE d.joined) - count(*) FILTER (WHERE d.left_scope)
    FROM synchro_diff d
    LEFT JOIN LATERAL (SELECT sd.digest, sd.row_count FROM synchro.scope_digest sd
                       WHERE sd.stream_generation = gen AND sd.scope = d.scope
                       ORDER BY sd.commit_lsn DESC LIMIT 1) prev ON true
    GROUP BY d.scope, prev.digest, prev.row_count;

    -- The current version of each changed synced row.
    DELETE FROM synchro.synced_row s USING synchro_impact i
    WHERE i.own AND i.image IS NULL AND s.table_id = i.table_id AND s.key = i.key;
    INSERT INTO synchro.synced_row (table_id, key, version, checksum)
    SELECT i.table_id, i.key, i.version, i.checksum FROM synchro_impact i WHERE i.own AND i.image IS NOT NULL
    ON CONFLICT (table_id, key) DO UPDATE SET version = EXCLUDED.version, checksum = EXCLUDED.checksum;
END
$$;
