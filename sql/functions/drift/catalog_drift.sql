-- synchro.catalog_drift: the registered relations with relation drift no decoded
-- transaction can show, each with its first problem (bounded text, no row data):
-- the relation dropped; a registered column dropped and added again; a recorded
-- partition out of the tree, unlogged, with a replica identity other than
-- DEFAULT, or whose truncate guard is missing, not ENABLE ALWAYS or changed since
-- recorded (synchro.accept_partition_guards); a registered column rewritten in
-- place (its pg_attribute row and its table's storage both changed since
-- synchro.record_storage; synchro.accept_rewrite); a recorded enum label renamed
-- or a materialized label gone (synchro.record_decoded_enum_labels); an
-- inheritance child of a registered plain table. The worker blocks capture while
-- any exists and readiness reports registry drift (docs/change-stream.md,
-- "Registry activation and relation drift"); drift a decoded transaction shows
-- blocks at that transaction instead. Why each case is drift and how it is
-- repaired: docs/decisions.md, "Relation drift the stream cannot show".
CREATE OR REPLACE FUNCTION synchro.catalog_drift()
RETURNS TABLE (relation_id bigint, relation text, problem text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
-- PL/pgSQL keeps the query's plan for the session: the worker asks before
-- every batch.
AS $$
BEGIN
    RETURN QUERY
    SELECT d.relation_id, d.relation, d.problem
    FROM (SELECT r.relation_id, format('%I.%I', r.schema_name, r.relation_name) AS relation,
                 CASE
                     WHEN c.oid IS NULL THEN 'was dropped'
                     WHEN EXISTS (SELECT FROM unnest(r.columns, r.column_attnums) u(col, num)
                                  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = u.col
                                                     AND a.attnum > 0 AND NOT a.attisdropped
                                  WHERE a.attnum IS DISTINCT FROM u.num)
                         THEN 'has a registered column dropped and added again'
                     WHEN rewritten.name IS NOT NULL
                         THEN format('had registered column %I rewritten in place in %s (ALTER COLUMN ... TYPE ... USING): its values may have changed without row events',
                                     rewritten.col, rewritten.name)
                     WHEN child.name IS NOT NULL
                         THEN format('has child table %s (INHERITS): its rows are read through the table but never captured', child.name)
                     WHEN unlogged.name IS NOT NULL
                         THEN format('has partition %s that is unlogged (SET UNLOGGED): its rows are not written to WAL and cannot be captured, and a crash empties it without row events (ALTER TABLE ... SET LOGGED repairs it)', unlogged.name)
                     WHEN renamed.typ IS NOT NULL AND renamed.value = 0
                         THEN format('has a row captured with a label of enum type %s that it no longer has (ALTER TYPE ... RENAME VALUE after the row was written): registered values changed without row events',
                                     renamed.typ::regtype)
                     WHEN renamed.typ IS NOT NULL
                         THEN format('has a recorded value of enum type %s renamed (ALTER TYPE ... RENAME VALUE): registered values may have changed without row events',
                                     renamed.typ::regtype)
                     WHEN lost.name IS NOT NULL
                         THEN format('lost partition %s (detached or dropped while it may have held rows)', lost.name)
                     WHEN unguarded.name IS NOT NULL
                         THEN format('has partition %s without a truncate guard that fires in every session (missing, disabled or not ENABLE ALWAYS: its TRUNCATE would go unseen)', unguarded.name)
                     WHEN changed.name IS NOT NULL
                         THEN format('has partition %s whose guards changed since recorded (disabled and enabled again, or dropped and created again: a TRUNCATE meanwhile would have gone unseen; synchro.accept_partition_guards attests that none did)', changed.name)
                     WHEN c.relkind = 'p' AND EXISTS (SELECT FROM synchro.partition_tree(c.oid) t
                                                      JOIN pg_class pc ON pc.oid = t.relid
                                                      WHERE pc.relreplident <> 'd')
                         THEN 'has a partition with a replica identity other than DEFAULT'
                 END AS problem
          FROM synchro.relation r
          LEFT JOIN pg_class c ON c.oid = r.relation_oid
          -- A registered column of the table, or of a recorded partition, that
          -- kept its type while its pg_attribute row and the table's storage
          -- both changed since synchro.record_storage recorded them: ALTER
          -- COLUMN ... TYPE ... USING may have rewritten it. (VACUUM FULL and
          -- CLUSTER give new storage only, SET DEFAULT and the like write the
          -- column's row only, and the worker records either alone.)
          LEFT JOIN LATERAL (SELECT s.name, a.attname AS col
                             FROM (SELECT c.oid, c.relfilenode, r.relfilenode AS recorded, r.column_xmins AS xmins,
                                          format('%I.%I', r.schema_name, r.relation_name) AS name
                                   WHERE c.relkind = 'r'
                                   UNION ALL
                                   SELECT pc.oid, pc.relfilenode, rp.relfilenode, rp.column_xmins, rp.partition_name
                                   FROM synchro.relation_partition rp
                                   -- a lookup per recorded partition, never a scan of pg_class
                                   CROSS JOIN LATERAL (SELECT pc.oid, pc.relkind, pc.relfilenode FROM pg_class pc
                                                       WHERE pc.oid = rp.partition_oid OFFSET 0) pc
                                   WHERE rp.relation_id = r.relation_id AND pc.relkind = 'r') s
                             CROSS JOIN LATERAL unnest(r.columns, r.column_types, s.xmins) u(col, typ, xmin)
                             JOIN pg_attribute a ON a.attrelid = s.oid AND a.attname = u.col AND a.attnum > 0
                                                AND NOT a.attisdropped AND a.atttypid = u.typ
                             WHERE s.relfilenode <> s.recorded AND a.xmin::text IS DISTINCT FROM u.xmin
                             ORDER BY s.name, a.attname LIMIT 1) rewritten ON true
          -- The first inheritance child of a registered plain table: no fence
          -- fires for its rows and the publication does not carry them.
          LEFT JOIN LATERAL (SELECT synchro.qualified_name(i.inhrelid) AS name FROM pg_inherits i
                             WHERE i.inhparent = c.oid AND c.relkind = 'r'
                             ORDER BY 1 LIMIT 1) child ON true
          -- The first recorded partition that is unlogged.
          LEFT JOIN LATERAL (SELECT rp.partition_name AS name FROM synchro.relation_partition rp
                             -- a lookup per recorded partition, never a scan of pg_class
                             CROSS JOIN LATERAL (SELECT pc.relpersistence FROM pg_class pc
                                                 WHERE pc.oid = rp.partition_oid OFFSET 0) pc
                             WHERE rp.relation_id = r.relation_id AND pc.relpersistence <> 'p'
                             ORDER BY rp.partition_name LIMIT 1) unlogged ON true
          -- The first recorded enum value whose label changed (or that is gone,
          -- as the value 0 synchro.record_decoded_enum_labels records is).
          LEFT JOIN LATERAL (SELECT el.enum_type AS typ, el.enum_value AS value FROM synchro.relation_enum_label el
                             LEFT JOIN pg_enum e ON e.oid = el.enum_value
                             WHERE el.relation_id = r.relation_id AND e.enumlabel IS DISTINCT FROM el.label
                             ORDER BY el.enum_type, el.enum_value LIMIT 1) renamed ON true
          -- The first recorded partition no longer in the tree.
          -- (The tree is listed once per relation, not once per recorded partition;
          -- synchro.partition_tree reads it under the snapshot the records are
          -- read under, and locks nothing.)
          LEFT JOIN LATERAL (SELECT rp.partition_name AS name FROM synchro.relation_partition rp
                             LEFT JOIN synchro.partition_tree(r.relation_oid) t ON t.relid = rp.partition_oid
                             WHERE rp.relation_id = r.relation_id AND t.relid IS NULL
                             ORDER BY rp.partition_name LIMIT 1) lost ON true
          -- The first recorded partition whose truncate guard may not fire.
          LEFT JOIN LATERAL (SELECT rp.partition_name AS name FROM synchro.relation_partition rp
                             WHERE rp.relation_id = r.relation_id
                               AND NOT EXISTS (SELECT FROM pg_trigger tg WHERE tg.tgrelid = rp.partition_oid
                                               AND tg.tgname = 'synchro_truncate_guard' AND tg.tgenabled = 'A')
                             ORDER BY rp.partition_name LIMIT 1) unguarded ON true
          -- The first recorded partition whose guards changed since recorded.
          LEFT JOIN (SELECT rp.relation_id, min(rp.partition_name) AS name
                     FROM synchro.relation_partition rp
                     JOIN synchro.partition_guards() g ON g.relation_id = rp.relation_id AND g.partition_oid = rp.partition_oid
                     WHERE rp.guards IS DISTINCT FROM g.guards
                     GROUP BY rp.relation_id) changed ON changed.relation_id = r.relation_id) d
    WHERE d.problem IS NOT NULL
    ORDER BY d.relation_id;
END
$$;
