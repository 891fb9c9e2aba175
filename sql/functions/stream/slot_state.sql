-- synchro.slot_state: the state of replication slot name of this database, in
-- a word: missing, else its wal_status (reserved, extended, unreserved, lost).
CREATE OR REPLACE FUNCTION synchro.slot_state(name name)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT coalesce(s.wal_status, 'unknown') FROM pg_replication_slots s
                     WHERE s.slot_name = slot_state.name AND s.database = current_database()), 'missing')
$$;
