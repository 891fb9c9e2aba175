-- synchro.forget_lost_partition: the schema owner's way on after a recorded
-- partition was detached or dropped other than through
-- synchro.detach_partition, when it is known to have held no rows (or its
-- rows are accepted as stale for clients): forgets the recorded partitions
-- named partition_name (schema-qualified, as synchro.catalog_drift names them)
-- that are no longer in their relation's partition tree, so that the catalog
-- check stops blocking capture, and returns how many it forgot. Synchro cannot
-- verify the attestation: the rows such a partition held left without row
-- events, and clients keep them until they are written again elsewhere or a
-- reset rebuilds the scopes. It refuses (42704) a name with no lost recorded
-- partition; a partition still in the tree is released by
-- synchro.detach_partition instead.
CREATE OR REPLACE FUNCTION synchro.forget_lost_partition(partition_name text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    forgotten integer;
BEGIN
    DELETE FROM synchro.relation_partition rp
    USING synchro.relation r
    WHERE r.relation_id = rp.relation_id AND rp.partition_name = forget_lost_partition.partition_name
      AND NOT EXISTS (SELECT FROM pg_partition_tree(r.relation_oid::regclass) t WHERE t.relid::oid = rp.partition_oid);
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    IF forgotten = 0 THEN
        RAISE EXCEPTION 'synchro: no recorded partition named % has left its partition tree', partition_name
            USING ERRCODE = 'undefined_object',
                  HINT = 'synchro.catalog_drift() names lost partitions; one still attached is released by synchro.detach_partition().';
    END IF;
    RAISE WARNING 'synchro: forgot lost partition % of a registered relation; rows it held before it left stay with clients until written again',
        partition_name;
    RETURN forgotten;
END
$$;
