-- +goose Up
-- The partitions, at any level, of each registered partitioned relation. A
-- recorded partition that leaves the partition tree (DETACH PARTITION, or DROP
-- TABLE of the partition) takes its rows out of the registered relation
-- without a row event: synchro.catalog_drift reports it and capture blocks
-- until it is attached again, unless synchro.detach_partition released it
-- while it held no rows (docs/change-stream.md, "Registry activation and relation drift").
-- synchro.guard_partitions records partitions (registration calls it).
-- Relations registered before this migration record their partitions as they
-- are now.
CREATE TABLE synchro.relation_partition (
    relation_id    bigint NOT NULL REFERENCES synchro.relation,
    partition_oid  oid NOT NULL,
    partition_name text NOT NULL, -- schema-qualified, when recorded: names it once it is gone
    PRIMARY KEY (relation_id, partition_oid)
);
-- The partition guard looks a partition up on every statement that writes it directly.
CREATE INDEX relation_partition_by_oid ON synchro.relation_partition (partition_oid);
INSERT INTO synchro.relation_partition (relation_id, partition_oid, partition_name)
SELECT r.relation_id, t.relid, format('%I.%I', n.nspname, pc.relname)
FROM synchro.relation r
JOIN pg_class c ON c.oid = r.relation_oid AND c.relkind = 'p'
CROSS JOIN LATERAL pg_partition_tree(r.relation_oid::regclass) t
JOIN pg_class pc ON pc.oid = t.relid
JOIN pg_namespace n ON n.oid = pc.relnamespace
WHERE t.relid::oid <> r.relation_oid;

-- +goose Down
DROP TABLE synchro.relation_partition CASCADE;
