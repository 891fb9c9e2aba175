-- synchro.partition_guards: the fingerprint of the truncate and partition guards
-- of partition part: each guard's name, trigger oid and the xmin of its
-- pg_trigger row, so that disabling and enabling a guard again, or dropping
-- and creating it again, changes it (NULL without guards). synchro.guard_partitions
-- records it for each partition it guards; synchro.catalog_drift compares.
CREATE OR REPLACE FUNCTION synchro.partition_guards(part oid)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(format('%s:%s:%s', tg.tgname, tg.oid, tg.xmin), ',' ORDER BY tg.tgname)
    FROM pg_trigger tg
    WHERE tg.tgrelid = part AND tg.tgname IN ('synchro_truncate_guard', 'synchro_partition_guard')
$$;
