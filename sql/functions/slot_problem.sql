-- synchro.slot_problem: the one statement of what makes a replication slot able
-- to carry this database's change stream (ADR 001, "Slot acknowledgement";
-- README, "Slot loss"). problem says why the slot named p_slot_name cannot
-- (missing, not a pgoutput logical slot, another database's, temporary, no WAL
-- reserved or invalidated, no confirmed position) and is NULL only when every
-- fact needed is present and healthy. The worker blocks on it before reading any
-- WAL; readiness's slot check reports it. One read of pg_replication_slots, so
-- the problem, wal_status and confirmed position describe the same slot.
-- confirmed_flush_lsn is the slot's position when the slot is this database's.
CREATE OR REPLACE FUNCTION synchro.slot_problem(p_slot_name name,
    OUT problem text, OUT wal_status text, OUT confirmed_flush_lsn pg_lsn)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
               WHEN s.slot_name IS NULL THEN format('replication slot %s is missing', p_slot_name)
               -- Before the database: a physical slot has none.
               WHEN (s.slot_type = 'logical' AND s.plugin = 'pgoutput') IS NOT TRUE
                   THEN format('replication slot %s is not a pgoutput logical slot', p_slot_name)
               WHEN (s.database = current_database()) IS NOT TRUE
                   THEN format('replication slot %s belongs to database %s', p_slot_name, s.database)
               -- Someone recreated it under the stream's name: its position says
               -- nothing about what this stream acknowledged.
               WHEN s.temporary IS NOT FALSE THEN format('replication slot %s is temporary', p_slot_name)
               WHEN s.wal_status IS NULL
                   THEN format('replication slot %s reserves no WAL (wal_status unknown)', p_slot_name)
               WHEN s.wal_status = 'lost'
                   THEN format('replication slot %s is invalidated (wal_status lost): PostgreSQL no longer keeps '
                               'the WAL after its position (max_slot_wal_keep_size, say), so the transactions '
                               'there cannot be decoded from it', p_slot_name)
               WHEN s.confirmed_flush_lsn IS NULL
                   THEN format('replication slot %s has no confirmed position', p_slot_name)
           END,
           s.wal_status,
           CASE WHEN s.database = current_database() THEN s.confirmed_flush_lsn END
    -- Slot names are unique in the cluster: at most one row.
    FROM (SELECT) one
    LEFT JOIN pg_replication_slots s ON s.slot_name = p_slot_name
$$;
