-- synchro.check_wire_name: refuses (23505 duplicate_object) a wire name that
-- another synced table than table tid (NULL: any) already uses, compared
-- ignoring case.
CREATE OR REPLACE FUNCTION synchro.check_wire_name(rel oid, wire_name text, tid integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT FROM synchro.synced_table t WHERE lower(t.name) = lower(wire_name) AND t.table_id IS DISTINCT FROM tid) THEN
        RAISE EXCEPTION 'synchro: relation % rejected: wire name "%" is already used by another registered table (wire names are compared ignoring case); pass options.name',
            synchro.qualified_name(rel), wire_name
            USING ERRCODE = 'duplicate_object';
    END IF;
END
$$;
