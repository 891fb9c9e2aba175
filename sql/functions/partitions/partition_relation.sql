-- synchro.partition_relation: the registered relation (relation_id) that
-- recorded part as one of its partitions (synchro.relation_partition), when
-- part is in that relation's partition tree now, through attachments none of
-- which is pending detach (DETACH ... CONCURRENTLY not finished); NULL
-- otherwise: part is not recorded, or it was detached, moved under another
-- table, or is being detached. pgoutput describes a partition's rows by the
-- registered root only along such attachments, so only then are writes to
-- part captured.
CREATE OR REPLACE FUNCTION synchro.partition_relation(part oid)
RETURNS bigint
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE up (relid, pending) AS (
        SELECT part, false
        UNION ALL
        SELECT i.inhparent, i.inhdetachpending FROM up JOIN pg_inherits i ON i.inhrelid = up.relid
        WHERE NOT up.pending
    )
    SELECT r.relation_id
    FROM synchro.relation_partition rp
    JOIN synchro.relation r ON r.relation_id = rp.relation_id
    WHERE rp.partition_oid = part
      AND r.relation_oid IN (SELECT u.relid FROM up u)
      AND NOT EXISTS (SELECT FROM up u WHERE u.pending)
$$;
