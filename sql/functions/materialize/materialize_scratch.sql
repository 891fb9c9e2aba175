-- synchro.materialize_scratch: creates (once per session) the transaction-local
-- scratch tables of one batch: synchro_seg_event, where the worker stages the
-- batch's events (COPY) before it calls synchro.materialize_transaction, and the
-- tables materialize_transaction parses the batch into and
-- synchro.materialize_segment evaluates segments in. seq numbers the batch's
-- transactions in commit order from 1. The empty table synchro_seg_layout_9
-- marks the current layout: a session holding an older one (a bundle installed
-- while it was open) drops it and creates this one. The tables have no indexes
-- and the session's temporary buffers are 8 MB, so that a plan cached for one
-- batch serves the next and each commit's truncation stays cheap
-- (docs/decisions.md, "Capture throughput").
CREATE OR REPLACE FUNCTION synchro.materialize_scratch()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old regclass;
    plain regclass;
BEGIN
    IF to_regclass('pg_temp.synchro_seg_layout_9') IS NOT NULL THEN
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
    CREATE TEMP TABLE synchro_seg_layout_9 ();
    -- The batch's new transactions; applied is the number of their applicable events.
    CREATE TEMP TABLE synchro_seg_txn (
        seq integer, commit_lsn pg_lsn, end_lsn pg_lsn, xid bigint, commit_time timestamptz, event_count integer,
        applied integer, registry_generation bigint, bootstrap uuid
    ) ON COMMIT DELETE ROWS;
    -- Every applicable event of the batch, staged by the caller (img is NULL for a
    -- delete).
    CREATE TEMP TABLE synchro_seg_event (
        seq integer, commit_lsn pg_lsn, o integer, r bigint, k text, op text, img jsonb, partial boolean,
        f uuid, v text
    ) ON COMMIT DELETE ROWS;
    -- The net change of each row (relation, key) in each transaction; tid is the
    -- row's projection tuple before the segment, last marks its last change.
    CREATE TEMP TABLE synchro_seg_change (
        seq integer, commit_lsn pg_lsn, relation_id bigint, key text, old_image jsonb, new_image jsonb,
        event_ordinal integer, version text, tid tid, last boolean
    ) ON COMMIT DELETE ROWS;
    -- Synced rows whose membership is evaluated after each transaction; fresh
    -- marks a row with no projection before the segment (so no version or scope);
    -- prev_seq and next_* name the row's previous and next change in the segment.
    CREATE TEMP TABLE synchro_seg_impact (
        seq integer, commit_lsn pg_lsn, table_id integer, key text, key_num numeric, event_ordinal integer,
        own boolean, version text, image jsonb, wire jsonb, checksum bigint, prev_seq integer, fresh boolean,
        next_seq integer, next_commit_lsn pg_lsn, next_event_ordinal integer
    ) ON COMMIT DELETE ROWS;
    -- Their scopes after the transaction (with the change's position, version and
    -- checksum, and its next change), and before it (with the previous version and
    -- checksum, and the change's position); then the net membership change per
    -- (transaction, scope, row), where delta is the checksum change modulo 2^32 as
    -- a signed 32-bit residue.
    -- These rows hold keys, scopes and versions only, each within the btree entry
    -- limit (about 2.7kB) of the tables they come from or go to, so their tables
    -- need no TOAST table; without one, emptying a table at commit truncates one
    -- file instead of also rebuilding a TOAST index (about 0.4 ms a table, every
    -- batch). PostgreSQL 15 creates a TOAST table unless every variable-length
    -- column is PLAIN, which only ALTER TABLE sets: the fixed-width columns are
    -- created first and the others added PLAIN.
    CREATE TEMP TABLE synchro_seg_scope (
        seq integer, table_id integer, commit_lsn pg_lsn, event_ordinal integer, checksum bigint,
        next_seq integer, next_commit_lsn pg_lsn, next_event_ordinal integer
    ) ON COMMIT DELETE ROWS;
    CREATE TEMP TABLE synchro_seg_prev (
        seq integer, table_id integer, checksum bigint, commit_lsn pg_lsn, event_ordinal integer
    ) ON COMMIT DELETE ROWS;
    CREATE TEMP TABLE synchro_seg_diff (
        seq integer, commit_lsn pg_lsn, table_id integer, event_ordinal integer, upsert boolean, joined boolean,
        left_scope boolean, delta integer
    ) ON COMMIT DELETE ROWS;
    FOR plain IN VALUES ('synchro_seg_scope'::regclass), ('synchro_seg_prev'), ('synchro_seg_diff') LOOP
        EXECUTE format('ALTER TABLE %s ADD key text, ADD key_num numeric, ADD scope text, ADD version text,
                        ALTER key SET STORAGE PLAIN, ALTER key_num SET STORAGE PLAIN, ALTER scope SET STORAGE PLAIN,
                        ALTER version SET STORAGE PLAIN', plain);
    END LOOP;
END
$$;
