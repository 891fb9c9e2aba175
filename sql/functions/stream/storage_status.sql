-- synchro.storage_status: the storage each table of schema synchro takes, for
-- operators (synchroctl status, psql), largest first: its rows estimate (the
-- planner's reltuples once the table was vacuumed or analyzed, before that the
-- statistics' live rows), the bytes of the table with its TOAST, of its
-- indexes, and of both. Catalog figures only: no table is read, so it shows no
-- row data; sizing a table takes its ACCESS SHARE lock for a moment, as a
-- SELECT would, so it waits only on a DDL statement holding the table.
CREATE OR REPLACE FUNCTION synchro.storage_status(
    OUT table_name name, OUT rows_estimate bigint, OUT table_bytes bigint, OUT index_bytes bigint, OUT total_bytes bigint)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.relname, CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint ELSE pg_stat_get_live_tuples(c.oid) END,
           pg_table_size(c.oid), pg_indexes_size(c.oid), pg_total_relation_size(c.oid)
    FROM pg_class c
    WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind = 'r'
    ORDER BY pg_total_relation_size(c.oid) DESC, c.relname
$$;
