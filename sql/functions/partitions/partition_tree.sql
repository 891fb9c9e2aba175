-- synchro.partition_tree: the partitions of root at any level (root itself
-- excluded), with their level (1: attached to root), read from pg_inherits
-- under the calling statement's snapshot; empty unless root is a partitioned
-- table. Like pg_partition_tree it leaves out a partition pending detach
-- (DETACH ... CONCURRENTLY whose first phase committed) with its subtree.
-- Unlike pg_partition_tree it takes no lock: the catalog checks that run
-- beside DDL (synchro.catalog_drift, before each of the worker's batches, and
-- synchro.evaluate_readiness) use it. pg_partition_tree locks every partition
-- (ACCESS SHARE, each parent before its children) and reads pg_inherits under
-- a catalog snapshot newer than the statement's: a check holding a
-- sub-partitioned partition while waiting for its child deadlocked with
-- synchro.detach_partition of that child (which locks the child, then its
-- parent), and a check that began before a detach_partition committed could
-- see the partition gone from the tree but still in the
-- synchro.relation_partition it read under the older snapshot: a lost
-- partition that never was, blocking capture until the next check.
CREATE OR REPLACE FUNCTION synchro.partition_tree(root oid)
RETURNS TABLE (relid oid, level integer)
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE tree (relid, level) AS (
        SELECT i.inhrelid, 1
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhparent AND c.relkind = 'p'
        WHERE i.inhparent = root AND NOT i.inhdetachpending
        UNION ALL
        SELECT i.inhrelid, t.level + 1
        FROM tree t
        JOIN pg_inherits i ON i.inhparent = t.relid
        WHERE NOT i.inhdetachpending
    )
    SELECT t.relid, t.level FROM tree t
$$;
