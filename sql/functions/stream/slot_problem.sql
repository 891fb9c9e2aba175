-- synchro.slot_problem: the one statement of what makes a replication slot able
-- to carry this database's change stream (docs/change-stream.md, "Slot acknowledgement";
-- docs/operations.md, "The replication slot"). problem says why the slot named p_slot_name
-- cannot (missing, not a pgoutput logical slot, another database's, temporary,
-- no WAL reserved or invalidated, no confirmed position) and is NULL only when
-- every fact needed is present and healthy. The worker blocks on it before it
-- reads WAL; readiness's slot check reports it. One row from one read of
-- pg_replication_slots, so the problem, wal_status and confirmed position
-- describe the same slot; confirmed_flush_lsn is the slot's position when the
-- slot is this database's. A SQL function without a SET clause and with
-- schema-qualified names, so that the planner inlines it: the worker reads it
-- before every batch, and a SQL function that is not inlined is planned again
-- on every execution of the query calling it.
-- Its first version returned OUT parameters rather than a table, a return type
-- CREATE OR REPLACE cannot change.
DROP FUNCTION IF EXISTS synchro.slot_problem(name);
CREATE OR REPLACE FUNCTION synchro.slot_problem(p_slot_name name)
RETURNS TABLE (problem text, wal_status text, confirmed_flush_lsn pg_lsn)
LANGUAGE sql STABLE
AS $$
    SELECT CASE
               WHEN s.slot_name IS NULL THEN pg_catalog.format('replication slot %s is missing', p_slot_name)
               -- Before the database: a physical slot has none.
               WHEN (s.slot_type OPERATOR(pg_catalog.=) 'logical' AND s.plugin OPERATOR(pg_catalog.=) 'pgoutput') IS NOT TRUE
                   THEN pg_catalog.format('replication slot %s is not a pgoutput logical slot', p_slot_name)
               WHEN (s.database OPERATOR(pg_catalog.=) pg_catalog.current_database()) IS NOT TRUE
                   THEN pg_catalog.format('replication slot %s belongs to database %s', p_slot_name, s.database)
               -- Someone recreated it under the stream's name: its position says
               -- nothing about what this stream acknowledged.
               WHEN s.temporary IS NOT FALSE
                   THEN pg_catalog.format('replication slot %s is temporary', p_slot_name)
               WHEN s.wal_status IS NULL
                   THEN pg_catalog.format('replication slot %s reserves no WAL (wal_status unknown)', p_slot_name)
               WHEN s.wal_status OPERATOR(pg_catalog.=) 'lost'
                   THEN pg_catalog.format('replication slot %s is invalidated (wal_status lost): PostgreSQL no longer keeps '
                                          'the WAL after its position (max_slot_wal_keep_size, say), so the transactions '
                                          'there cannot be decoded from it', p_slot_name)
               WHEN s.confirmed_flush_lsn IS NULL
                   THEN pg_catalog.format('replication slot %s has no confirmed position', p_slot_name)
           END,
           s.wal_status,
           CASE WHEN s.database OPERATOR(pg_catalog.=) pg_catalog.current_database() THEN s.confirmed_flush_lsn END
    -- Slot names are unique in the cluster: at most one slot row.
    FROM (SELECT) one
    LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name OPERATOR(pg_catalog.=) p_slot_name
$$;
