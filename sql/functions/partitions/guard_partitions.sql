-- synchro.guard_partitions: installs the synchro_truncate_guard (BEFORE TRUNCATE)
-- and synchro_partition_guard (BEFORE INSERT/UPDATE/DELETE, synchro.partition_guard)
-- statement triggers, ENABLE ALWAYS, on every partition at any level of the
-- registered partitioned relation rid (default: of every one) that lacks them,
-- records each such partition in synchro.relation_partition with the
-- fingerprint of its guards (synchro.partition_guards), and returns how many
-- triggers it installed or enabled. It attests nothing about a partition
-- recorded before (changed guards stay drift until
-- synchro.accept_partition_guards). Registration calls it; after creating or
-- attaching a partition, whoever registers tables calls it in the same
-- migration (until then the fence refuses writes into the partition and
-- readiness reports it). Refuses (42P16, installing nothing) while the tree
-- holds an unlogged partition. Why: docs/decisions.md, "Relation drift the
-- stream cannot show" (Partitions).
DROP FUNCTION IF EXISTS synchro.guard_partitions();
CREATE OR REPLACE FUNCTION synchro.guard_partitions(rid bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    part regclass;
    guard text;
    events text;
    func text;
    present boolean;
    changed integer := 0;
    recorded oid[];
BEGIN
    SELECT t.relid INTO part
    FROM synchro.relation r
    JOIN pg_class c ON c.oid = r.relation_oid AND c.relkind = 'p'
    CROSS JOIN LATERAL pg_partition_tree(r.relation_oid::regclass) t
    JOIN pg_class pc ON pc.oid = t.relid
    WHERE (rid IS NULL OR r.relation_id = rid) AND pc.relpersistence <> 'p'
    ORDER BY t.relid
    LIMIT 1;
    IF part IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: partition % rejected: it is unlogged: its rows are not written to WAL and cannot be captured',
            synchro.qualified_name(part)
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    FOR part, guard, events, func, present IN
        SELECT t.relid, g.name, g.events, g.func, tg.oid IS NOT NULL
        FROM synchro.relation r
        JOIN pg_class c ON c.oid = r.relation_oid AND c.relkind = 'p'
        CROSS JOIN LATERAL pg_partition_tree(r.relation_oid::regclass) t
        CROSS JOIN (VALUES ('synchro_truncate_guard', 'TRUNCATE', 'truncate_guard'),
                           ('synchro_partition_guard', 'INSERT OR UPDATE OR DELETE', 'partition_guard')) g(name, events, func)
        LEFT JOIN pg_trigger tg ON tg.tgrelid = t.relid AND tg.tgname = g.name
        WHERE (rid IS NULL OR r.relation_id = rid)
          AND t.relid::oid <> r.relation_oid
          AND tg.tgenabled IS DISTINCT FROM 'A'
        ORDER BY t.level, t.relid, g.name
    LOOP
        IF NOT present THEN
            EXECUTE format('CREATE TRIGGER %I BEFORE %s ON %s FOR EACH STATEMENT EXECUTE FUNCTION synchro.%I()',
                           guard, events, synchro.qualified_name(part), func);
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', synchro.qualified_name(part), guard);
        changed := changed + 1;
    END LOOP;
    WITH added AS (
        INSERT INTO synchro.relation_partition (relation_id, partition_oid, partition_name)
        SELECT r.relation_id, t.relid, synchro.qualified_name(t.relid)
        FROM synchro.relation r
        JOIN pg_class c ON c.oid = r.relation_oid AND c.relkind = 'p'
        CROSS JOIN LATERAL pg_partition_tree(r.relation_oid::regclass) t
        WHERE (rid IS NULL OR r.relation_id = rid)
          AND t.relid::oid <> r.relation_oid
        ON CONFLICT DO NOTHING
        RETURNING relation_partition.relation_id, relation_partition.partition_oid)
    SELECT array_agg(a.partition_oid) INTO recorded FROM added a;
    -- The guards of the partitions recorded now, as they are. A partition
    -- recorded before keeps the fingerprint it had: a change of its guards
    -- (one this call enabled or created again too) stays catalog drift until
    -- synchro.accept_partition_guards attests that nothing went through.
    UPDATE synchro.relation_partition rp SET guards = g.guards
    FROM synchro.partition_guards() g
    WHERE g.relation_id = rp.relation_id AND g.partition_oid = rp.partition_oid
      AND rp.partition_oid = ANY (recorded);
    -- The storage of the partitions recorded now (and harmless changes of
    -- others); it attests no rewrite.
    PERFORM synchro.record_storage(rid);
    RETURN changed;
END
$$;
