-- synchro.detach_partition: detaches part, a recorded partition (at any level)
-- of a registered partitioned relation, that holds no rows, and releases it:
-- its records in synchro.relation_partition and its truncate guards go, so
-- that neither the detached table nor a later DROP TABLE of it is relation
-- drift. Detaching or dropping a partition any other way takes its rows out of
-- the registered relation without a row event, which synchro.catalog_drift
-- reports and which blocks capture until the partition is attached again
-- (ADR 001, "Registry activation and relation drift").
-- It refuses (55000) a partition that holds rows: delete them first, each
-- delete passes a fence and clients see the rows go. The partition stays
-- locked (ACCESS EXCLUSIVE) from the emptiness check to the end of the
-- transaction, so no row can enter it in between. It refuses (42809) a table
-- that is not a recorded partition of a registered relation, and changes
-- nothing when it refuses.
CREATE OR REPLACE FUNCTION synchro.detach_partition(part regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    rid bigint;
    parent oid;
    populated boolean;
    released oid[];
    guarded regclass;
BEGIN
    SELECT rp.relation_id INTO rid FROM synchro.relation_partition rp WHERE rp.partition_oid = part::oid;
    SELECT i.inhparent INTO parent FROM pg_inherits i WHERE i.inhrelid = part::oid;
    IF rid IS NULL OR parent IS NULL THEN
        RAISE EXCEPTION 'synchro: % is not a recorded partition of a registered relation', synchro.qualified_name(part)
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Partitions are recorded by synchro.guard_partitions(), which registration calls; call it after creating or attaching one.';
    END IF;
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', synchro.qualified_name(part));
    EXECUTE format('SELECT EXISTS (SELECT FROM %s)', synchro.qualified_name(part)) INTO populated;
    IF populated THEN
        RAISE EXCEPTION 'synchro: partition % still holds rows; detaching it would take them out of % without a row event',
            synchro.qualified_name(part), synchro.qualified_name(parent)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Delete its rows first (each delete is captured), then detach it.';
    END IF;
    released := ARRAY(SELECT t.relid::oid FROM pg_partition_tree(part) t);
    EXECUTE format('ALTER TABLE %s DETACH PARTITION %s', synchro.qualified_name(parent), synchro.qualified_name(part));
    FOR guarded IN
        SELECT g.tgrelid FROM pg_trigger g WHERE g.tgrelid = ANY (released) AND g.tgname = 'synchro_truncate_guard'
    LOOP
        EXECUTE format('DROP TRIGGER synchro_truncate_guard ON %s', synchro.qualified_name(guarded));
    END LOOP;
    DELETE FROM synchro.relation_partition rp WHERE rp.relation_id = rid AND rp.partition_oid = ANY (released);
END
$$;
