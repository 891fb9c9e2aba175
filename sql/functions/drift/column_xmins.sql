-- synchro.column_xmins: the xmin of the pg_attribute row of each of cols in
-- table tbl, in the order of cols (NULL for a column it does not have). Any
-- ALTER TABLE that changes a column writes its row again: with the table's
-- storage (pg_class.relfilenode) it tells a rewrite of a column's values in
-- place from harmless DDL (synchro.record_storage, synchro.catalog_drift).
CREATE OR REPLACE FUNCTION synchro.column_xmins(tbl oid, cols name[])
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY(SELECT a.xmin::text
                 FROM unnest(cols) WITH ORDINALITY u(col, i)
                 LEFT JOIN pg_attribute a ON a.attrelid = tbl AND a.attname = u.col AND a.attnum > 0 AND NOT a.attisdropped
                 ORDER BY u.i)
$$;
