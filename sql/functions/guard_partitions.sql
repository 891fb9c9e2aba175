-- synchro.guard_partitions: installs the synchro_truncate_guard (BEFORE TRUNCATE)
-- and synchro_partition_guard (BEFORE INSERT/UPDATE/DELETE, see
-- synchro.partition_guard) statement triggers on every partition, at any
-- level, of the registered partitioned relation rid (by default: of every
-- one) that lacks them, records every such partition in
-- synchro.relation_partition (one that later leaves the tree without
-- synchro.detach_partition is relation drift: synchro.catalog_drift), and
-- returns how many triggers it installed. PostgreSQL clones row triggers onto new
-- partitions but not statement triggers, and with publish_via_partition_root the
-- TRUNCATE of a single partition is not decoded at all: without this guard it
-- would empty the partition unseen (ADR 001, "TRUNCATE and replica identity").
-- Registration calls it for the relation it registers; after creating or
-- attaching a partition, whoever registers tables calls it in the same migration
-- (readiness reports the partition's missing guard until then). Rows an attached
-- table already holds are captured only when next written.
DROP FUNCTION IF EXISTS synchro.guard_partitions();
CREATE OR REPLACE FUNCTION synchro.guard_partitions(rid bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    part regclass;
    guard text;
    events text;
    func text;
    installed integer := 0;
BEGIN
    FOR part, guard, events, func IN
        SELECT t.relid, g.name, g.events, g.func
        FROM synchro.relation r
        JOIN pg_class c ON c.oid = r.relation_oid AND c.relkind = 'p'
        CROSS JOIN LATERAL pg_partition_tree(r.relation_oid::regclass) t
        CROSS JOIN (VALUES ('synchro_truncate_guard', 'TRUNCATE', 'truncate_guard'),
                           ('synchro_partition_guard', 'INSERT OR UPDATE OR DELETE', 'partition_guard')) g(name, events, func)
        WHERE (rid IS NULL OR r.relation_id = rid)
          AND t.relid::oid <> r.relation_oid
          AND NOT EXISTS (SELECT FROM pg_trigger tg WHERE tg.tgrelid = t.relid AND tg.tgname = g.name)
        ORDER BY t.level, t.relid, g.name
    LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE %s ON %s FOR EACH STATEMENT EXECUTE FUNCTION synchro.%I()',
                       guard, events, synchro.qualified_name(part), func);
        installed := installed + 1;
    END LOOP;
    INSERT INTO synchro.relation_partition (relation_id, partition_oid, partition_name)
    SELECT r.relation_id, t.relid, synchro.qualified_name(t.relid)
    FROM synchro.relation r
    JOIN pg_class c ON c.oid = r.relation_oid AND c.relkind = 'p'
    CROSS JOIN LATERAL pg_partition_tree(r.relation_oid::regclass) t
    WHERE (rid IS NULL OR r.relation_id = rid)
      AND t.relid::oid <> r.relation_oid
    ON CONFLICT DO NOTHING;
    RETURN installed;
END
$$;
