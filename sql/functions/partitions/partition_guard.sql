-- synchro.partition_guard: BEFORE INSERT/UPDATE/DELETE statement trigger that
-- synchro.guard_partitions installs on every recorded partition (not cloned,
-- so it stays on a partition that is detached). Writes through the registered
-- root do not fire it; a statement that writes the partition itself does. It
-- refuses (55000) the statement when the partition is recorded but no longer
-- in its registered relation's tree, or is being detached
-- (synchro.partition_relation): the cloned fence triggers are gone or
-- pgoutput no longer describes its rows by the root, so the write would never
-- be captured, and attaching the partition again would publish stale rows.
-- Capture is blocked by the lost partition meanwhile (synchro.catalog_drift);
-- a partition released by synchro.detach_partition or forgotten by
-- synchro.forget_lost_partition is not recorded, and is written freely.
CREATE OR REPLACE FUNCTION synchro.partition_guard()
RETURNS trigger
LANGUAGE plpgsql
-- Definer: writers of registered tables need no rights on the synchro schema.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT FROM synchro.relation_partition rp WHERE rp.partition_oid = TG_RELID)
       AND synchro.partition_relation(TG_RELID) IS NULL THEN
        RAISE EXCEPTION 'synchro: %.% was detached from its registered relation, or is being detached, other than through synchro.detach_partition; writes to it would never be captured',
            TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Attach it again (capture is blocked until then), or have the owner run synchro.forget_lost_partition().';
    END IF;
    RETURN NULL;
END
$$;
