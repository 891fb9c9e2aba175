-- +goose Up
-- The storage (pg_class.relfilenode) of each registered table and recorded
-- partition when it was registered or recorded. ALTER COLUMN ... TYPE ... USING
-- that keeps a registered column's type rewrites the table's values without
-- row events; its trace in the catalog is a new relfilenode whose pg_class row
-- the same transaction wrote as the column's pg_attribute row
-- (synchro.catalog_drift). Comparing with the recorded storage leaves out the
-- registering transaction itself (a table created and registered in one
-- migration). Relations registered before this migration record their storage
-- as it is now.
ALTER TABLE synchro.relation ADD COLUMN relfilenode oid;
ALTER TABLE synchro.relation_partition ADD COLUMN relfilenode oid;
UPDATE synchro.relation r SET relfilenode = (SELECT c.relfilenode FROM pg_class c WHERE c.oid = r.relation_oid);
UPDATE synchro.relation_partition rp SET relfilenode = (SELECT c.relfilenode FROM pg_class c WHERE c.oid = rp.partition_oid);

-- +goose Down
ALTER TABLE synchro.relation DROP COLUMN relfilenode CASCADE;
ALTER TABLE synchro.relation_partition DROP COLUMN relfilenode CASCADE;
