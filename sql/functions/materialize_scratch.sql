-- synchro.materialize_scratch: creates (once per session) the transaction-local
-- scratch tables that synchro.materialize_transaction parses a batch into and
-- synchro.materialize_segment evaluates a segment of source transactions in. seq
-- numbers the batch's transactions in commit order. The empty table
-- synchro_seg_layout_6 marks the current layout: a session holding an older one
-- (a function bundle installed while it was open) drops it and creates this one.
-- A session that has not touched temporary tables yet gets 8MB of temporary
-- buffers whatever the server's temp_buffers: every commit truncates the scratch
-- tables, and each truncation scans all of the session's temporary buffers (64MB
-- made every batch's commit cost about 4 ms; a 2,000-transaction batch's scratch
-- rows gain nothing from more).
CREATE OR REPLACE FUNCTION synchro.materialize_scratch()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    old regclass;
BEGIN
    IF to_regclass('pg_temp.synchro_seg_layout_6') IS NOT NULL THEN
        RETURN;
    END IF;
    BEGIN
        PERFORM set_config('temp_buffers', '8MB', false);
    EXCEPTION WHEN invalid_parameter_value THEN
        NULL; -- temporary tables were used before: keep the session's setting
    END;
    FOR old IN SELECT c.oid::regclass FROM pg_class c
               WHERE c.relnamespace = pg_my_temp_schema() AND c.relkind = 'r' AND c.relname LIKE 'synchro\_seg\_%' LOOP
        EXECUTE format('DROP TABLE %s', old);
    END LOOP;
    CREATE TEMP TABLE synchro_seg_layout_6 ();
    -- The batch's new transactions.
    CREATE TEMP TABLE synchro_seg_txn (
        seq integer, commit_lsn pg_lsn, end_lsn pg_lsn, xid bigint, commit_time timestamptz, event_count integer,
        registry_generation bigint
    ) ON COMMIT DELETE ROWS;
    -- Every applicable event of the batch.
    CREATE TEMP TABLE synchro_seg_event (
        seq integer, commit_lsn pg_lsn, o integer, r bigint, k text, op text, img jsonb, partial boolean,
        f uuid, v text
    ) ON COMMIT DELETE ROWS;
    -- The net change of each row (relation, key) in each transaction; tid is the
    -- row's projection tuple before the segment, last marks its last change.
    CREATE TEMP TABLE synchro_seg_change (
        seq integer, commit_lsn pg_lsn, relation_id bigint, key text, old_image jsonb, new_image jsonb,
        event_ordinal integer, version text, tid tid, last boolean, PRIMARY KEY (seq, relation_id, key)
    ) ON COMMIT DELETE ROWS;
    -- Synced rows whose membership is evaluated after each transaction; fresh
    -- marks a row with no projection before the segment (so no version or scope).
    CREATE TEMP TABLE synchro_seg_impact (
        seq integer, commit_lsn pg_lsn, table_id integer, key text, key_num numeric, event_ordinal integer,
        own boolean, version text, image jsonb, wire jsonb, checksum bigint, prev_seq integer, fresh boolean,
        PRIMARY KEY (table_id, key, seq)
    ) ON COMMIT DELETE ROWS;
    -- Their scopes after the transaction, and before it.
    CREATE TEMP TABLE synchro_seg_scope (seq integer, table_id integer, key text, scope text) ON COMMIT DELETE ROWS;
    CREATE INDEX ON synchro_seg_scope (seq, table_id, key);
    CREATE TEMP TABLE synchro_seg_prev (
        seq integer, table_id integer, key text, scope text, version text, checksum bigint
    ) ON COMMIT DELETE ROWS;
    CREATE INDEX ON synchro_seg_prev (seq, table_id, key, scope);
    -- Net membership change per (transaction, scope, row); delta is the checksum
    -- change modulo 2^32, as a signed 32-bit residue.
    CREATE TEMP TABLE synchro_seg_diff (
        seq integer, commit_lsn pg_lsn, scope text, table_id integer, key text, key_num numeric,
        event_ordinal integer, op text, version text, joined boolean, left_scope boolean, delta integer
    ) ON COMMIT DELETE ROWS;
END
$$;
