-- synchro.accept_partition_guards: the schema owner's way on after the guards
-- of a recorded partition of registered relation rel changed since they were
-- recorded (disabled and enabled again, dropped and created again, also by
-- synchro.guard_partitions restoring a missing or disabled one), which
-- synchro.catalog_drift reports and which blocks capture: meanwhile a
-- TRUNCATE of the partition (which pgoutput never sends), or a write into it
-- while it was detached, may have gone through unseen. It records the guards
-- of every recorded partition of rel in its tree as they are now (the owner's
-- attestation that no partition was truncated, nor written while detached,
-- meanwhile; Synchro cannot verify it), so that the check stops blocking
-- capture, and returns how many partitions it recorded. Guards that still do
-- not fire in every session stay drift (synchro.guard_partitions restores
-- them). It refuses (42704) a relation that is not registered.
CREATE OR REPLACE FUNCTION synchro.accept_partition_guards(rel regclass)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid bigint := synchro.registered_relation(rel);
    parts integer;
BEGIN
    UPDATE synchro.relation_partition rp SET guards = g.guards
    FROM synchro.partition_guards() g
    WHERE g.relation_id = rid AND rp.relation_id = rid AND g.partition_oid = rp.partition_oid
      AND rp.guards IS DISTINCT FROM g.guards
      AND EXISTS (SELECT FROM pg_partition_tree(rel) t WHERE t.relid::oid = rp.partition_oid);
    GET DIAGNOSTICS parts = ROW_COUNT;
    RAISE WARNING 'synchro: recorded the partition guards of % (% partitions changed): a TRUNCATE or a write while detached that went through meanwhile stays unseen by clients', rel, parts;
    RETURN parts;
END
$$;
