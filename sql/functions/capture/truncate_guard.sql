-- synchro.truncate_guard: BEFORE TRUNCATE statement trigger of every registered
-- relation and of each of its partitions, firing in every session (ENABLE
-- ALWAYS, also with session_replication_role = replica). TRUNCATE is unsupported
-- in protocol v3 (docs/change-stream.md); refusing it up front keeps capture running. A
-- TRUNCATE of the relation that bypasses a disabled trigger still blocks capture
-- when the worker decodes it; one of a partition is never decoded, so capture
-- blocks while a partition's guard may not fire (synchro.catalog_drift).
CREATE OR REPLACE FUNCTION synchro.truncate_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'synchro: TRUNCATE of registered relation %.% is not supported; delete rows instead, or perform an operator stream reset',
        TG_TABLE_SCHEMA, TG_TABLE_NAME
        USING ERRCODE = 'feature_not_supported';
END
$$;
