-- +goose Up
-- The xmin of each registered column's pg_attribute row (in the order of
-- synchro.relation.columns), beside the storage (relfilenode) recorded for each
-- registered table and recorded partition. ALTER COLUMN ... TYPE ... USING that
-- keeps a registered column's type rewrites its values without row events: it
-- gives the table new storage and writes the column's pg_attribute row. Either
-- alone is harmless (VACUUM FULL, CLUSTER; SET DEFAULT, SET STATISTICS) and the
-- worker records it (synchro.record_storage); both changed since recorded is
-- catalog drift (synchro.catalog_drift) until synchro.accept_rewrite records
-- them, whatever DDL wrote either row again afterwards. This migration
-- records the columns as they are (synchro.column_xmins, which the function
-- bundle installs after the migrations, computes the same).
ALTER TABLE synchro.relation ADD COLUMN column_xmins text[];
ALTER TABLE synchro.relation_partition ADD COLUMN column_xmins text[];
UPDATE synchro.relation r
SET column_xmins = ARRAY(SELECT a.xmin::text
                         FROM unnest(r.columns) WITH ORDINALITY u(col, i)
                         LEFT JOIN pg_attribute a ON a.attrelid = r.relation_oid AND a.attname = u.col
                                                 AND a.attnum > 0 AND NOT a.attisdropped
                         ORDER BY u.i);
UPDATE synchro.relation_partition rp
SET column_xmins = ARRAY(SELECT a.xmin::text
                         FROM synchro.relation r
                         CROSS JOIN LATERAL unnest(r.columns) WITH ORDINALITY u(col, i)
                         LEFT JOIN pg_attribute a ON a.attrelid = rp.partition_oid AND a.attname = u.col
                                                 AND a.attnum > 0 AND NOT a.attisdropped
                         WHERE r.relation_id = rp.relation_id
                         ORDER BY u.i);

-- +goose Down
ALTER TABLE synchro.relation DROP COLUMN column_xmins CASCADE;
ALTER TABLE synchro.relation_partition DROP COLUMN column_xmins CASCADE;
