-- synchro.materialize_scratch: creates (once per session) the transaction-local
-- scratch tables materialization evaluates one source transaction in.
CREATE OR REPLACE FUNCTION synchro.materialize_scratch()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    IF to_regclass('pg_temp.synchro_change') IS NULL THEN
        -- The net change of each row (relation, key) in the transaction.
        CREATE TEMP TABLE synchro_change (
            relation_id bigint, key text, old_image jsonb, new_image jsonb,
            event_ordinal integer, version text, PRIMARY KEY (relation_id, key)
        ) ON COMMIT DELETE ROWS;
        -- Synced rows whose membership is re-evaluated.
        CREATE TEMP TABLE synchro_impact (
            table_id integer, key text, key_num numeric, event_ordinal integer, own boolean,
            version text, image jsonb, checksum bigint, PRIMARY KEY (table_id, key)
        ) ON COMMIT DELETE ROWS;
        -- Their scopes at the transaction's final projected state.
        CREATE TEMP TABLE synchro_scope (table_id integer, key text, scope text) ON COMMIT DELETE ROWS;
        -- Net membership changes per (scope, row); delta is the checksum change.
        CREATE TEMP TABLE synchro_diff (
            scope text, table_id integer, key text, op text, version text,
            joined boolean, left_scope boolean, delta bigint
        ) ON COMMIT DELETE ROWS;
    END IF;
END
$$;
