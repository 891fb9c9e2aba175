-- synchro.detach_partition: detaches part, a recorded partition (at any level)
-- of a registered partitioned relation that is in its tree now
-- (synchro.partition_relation) and holds no rows, and releases it: its records
-- in synchro.relation_partition and its guards go, so that neither the detached
-- table nor a later DROP TABLE of it is relation drift (detached any other way,
-- it is: synchro.catalog_drift). It refuses, changing nothing: a partition that
-- holds rows (55000: delete them first, through the fence); a REPEATABLE READ or
-- SERIALIZABLE transaction (25000: the emptiness check reads a snapshot taken
-- after the ACCESS EXCLUSIVE lock it holds to the end of the transaction); a row
-- security policy that would hide rows (42501: it reads with row_security off);
-- a table that is not a recorded partition in its relation's tree now (42809).
-- Why: docs/decisions.md, "Relation drift the stream cannot show" (Partitions).
CREATE OR REPLACE FUNCTION synchro.detach_partition(part regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET row_security = off
AS $$
DECLARE
    rid bigint := synchro.partition_relation(part);
    parent oid;
    populated boolean;
    released oid[];
    guarded regclass;
    guard name;
BEGIN
    IF rid IS NULL THEN
        RAISE EXCEPTION 'synchro: % is not a recorded partition of a registered relation', synchro.qualified_name(part)
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Partitions are recorded by synchro.guard_partitions(), which registration calls; call it after creating or attaching one. A lost partition is named by synchro.catalog_drift().';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'synchro: detach_partition must run in a READ COMMITTED transaction: its emptiness check needs a snapshot taken after it locks the partition'
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    SELECT i.inhparent INTO parent FROM pg_inherits i WHERE i.inhrelid = part::oid;
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
    FOR guarded, guard IN
        SELECT g.tgrelid, g.tgname FROM pg_trigger g
        WHERE g.tgrelid = ANY (released) AND g.tgname IN ('synchro_truncate_guard', 'synchro_partition_guard')
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', guard, synchro.qualified_name(guarded));
    END LOOP;
    DELETE FROM synchro.relation_partition rp WHERE rp.relation_id = rid AND rp.partition_oid = ANY (released);
END
$$;
