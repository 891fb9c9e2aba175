-- synchro.fence: AFTER INSERT/UPDATE/DELETE row trigger of every registered
-- relation; arguments fixed at registration: relation_id, registration_kind,
-- schema, name, OID, key column, table_id ('' for a capture dependency).
-- For each row operation that occurs it rejects a write into an unrecorded or
-- unlogged partition (55000), a key change or a row written frozen (0A000) and a
-- key over synchro.max_key_bytes (54000); locks the row's identity reservation
-- (synchro.row_head) and checks that the fences of one row fire in the order of
-- its operations (27000; docs/decisions.md, "Fence order check"); allocates an
-- opaque version and a fence_id, increments the transaction's registered-DML
-- ordinal (synchro.dml_ordinal; a value that is not a count above the row's
-- previous one fails with 22023), records the fence (bound to the push mutation
-- of synchro.client_id / synchro.mutation_id, pending for that client until
-- materialized) and emits one transactional logical message "synchro.fence"
-- (docs/change-stream.md, "Write fences and opaque row versions").
-- It creates no pull-visible effect.
CREATE OR REPLACE FUNCTION synchro.fence()
RETURNS trigger
LANGUAGE plpgsql
-- Definer: writers of registered tables need no rights on the synchro schema, and
-- pg_logical_emit_message is reserved to privileged roles.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid bigint := TG_ARGV[0]::bigint;
    key_column text := TG_ARGV[5];
    old_key jsonb;
    new_key jsonb;
    key_text text;
    xid xid8 := pg_current_xact_id();
    ordinal_setting text;
    ordinal integer;
    push_client text;
    -- A time-ordered UUID (version 7 layout: milliseconds since the epoch in the
    -- first 48 bits, the rest from one random draw), so that fences are appended
    -- at the end of the fence_id index instead of all over it: a random UUID
    -- costs every writing transaction a random index page, about 13 µs here.
    new_fence_id uuid := encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                            PLACING substring(int8send(floor(date_part('epoch', clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
                            52, 1), 53, 1), 'hex')::uuid;
    -- Opaque (clients only compare versions for equality) and unique like the
    -- fence_id it is spelled from, and time-ordered like it, so that a new row
    -- version goes at the end of synchro.row_version's primary key instead of on
    -- a random page of it (an md5 cost materialization a page per row, and a
    -- disk read once the index outgrows memory).
    new_version text := translate(new_fence_id::text, '-', '');
    reserved boolean;
    live boolean;
BEGIN
    -- A partition created or attached after registration has this (cloned)
    -- trigger but none of the statement guards until synchro.guard_partitions
    -- records it; a TRUNCATE of it would never be decoded (pgoutput publishes
    -- partitions through the root), so it may hold no captured row before then.
    IF TG_RELID <> TG_ARGV[4]::oid
       AND NOT EXISTS (SELECT FROM synchro.relation_partition rp WHERE rp.partition_oid = TG_RELID) THEN
        RAISE EXCEPTION 'synchro: partition %.% of registered relation %.% is not guarded yet; writes to it are refused until synchro.guard_partitions() installs its truncate guard',
            TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[2], TG_ARGV[3]
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Run SELECT synchro.guard_partitions() after creating or attaching a partition, in the same migration.';
    END IF;
    -- An unlogged partition's rows are not written to WAL; synchro.catalog_drift
    -- reports one as drift (a crash empties it without row events).
    IF TG_RELID <> TG_ARGV[4]::oid
       AND (SELECT c.relpersistence FROM pg_class c WHERE c.oid = TG_RELID) <> 'p' THEN
        RAISE EXCEPTION 'synchro: partition %.% of registered relation %.% is unlogged; writes to it are refused: its rows are not written to WAL and cannot be captured',
            TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[2], TG_ARGV[3]
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'ALTER TABLE ... SET LOGGED makes it capturable again.';
    END IF;
    -- A partition being detached (DETACH ... CONCURRENTLY not finished) still
    -- takes writes through the root from snapshots older than the detach, but
    -- pgoutput no longer describes its rows by the root: such a write could
    -- never be captured and would block capture as unmatched. pg_partition_root
    -- reads the catalog as it is now, not as the transaction's snapshot saw it,
    -- and a pending detach has no parent there.
    IF TG_RELID <> TG_ARGV[4]::oid AND pg_partition_root(TG_RELID) IS DISTINCT FROM TG_ARGV[4]::oid THEN
        RAISE EXCEPTION 'synchro: partition %.% of registered relation %.% is being detached; writes to it are refused',
            TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[2], TG_ARGV[3]
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF TG_OP <> 'INSERT' THEN
        old_key := to_jsonb(OLD) -> key_column;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        new_key := to_jsonb(NEW) -> key_column;
    END IF;
    IF coalesce(new_key, old_key) IS NULL THEN
        RAISE EXCEPTION 'synchro: registered key column "%" of %.% is missing (relation drift)', key_column, TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF TG_OP = 'UPDATE' AND old_key IS DISTINCT FROM new_key THEN
        RAISE EXCEPTION 'synchro: primary key change of registered relation %.% is not supported; delete and insert instead',
            TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'feature_not_supported';
    END IF;
    -- COPY ... FREEZE needs a relation created or rewritten in the current
    -- (sub)transaction, which then wrote its pg_class row: an xmin at or after the
    -- transaction's xid (its subtransactions' xids follow it), modulo 2^32. Only
    -- then is the visibility map read.
    IF TG_OP = 'INSERT'
       AND (SELECT ((c.xmin::text::bigint - xid::text::bigint) % 4294967296 + 4294967296) % 4294967296 < 2147483648
            FROM pg_class c WHERE c.oid = TG_RELID) THEN
        IF synchro.row_written_frozen(TG_RELID, NEW.ctid) THEN
            RAISE EXCEPTION 'synchro: COPY ... FREEZE into registered relation %.% is not supported; a frozen row loses the command id the fence order check needs',
                TG_TABLE_SCHEMA, TG_TABLE_NAME
                USING ERRCODE = 'feature_not_supported';
        END IF;
    END IF;
    key_text := coalesce(new_key, old_key) #>> '{}';
    IF octet_length(key_text) > synchro.max_key_bytes() THEN
        RAISE EXCEPTION 'synchro: primary key of a row of %.% is % bytes long; registered keys are limited to % bytes',
            TG_TABLE_SCHEMA, TG_TABLE_NAME, octet_length(key_text), synchro.max_key_bytes()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;

    -- The setting holds the transaction's last ordinal (absent before its first
    -- fence). Capture pairs a row's events with its fences by ordinal, so the
    -- value is checked here: a count, and (below) above the row's last one.
    ordinal_setting := coalesce(nullif(current_setting('synchro.dml_ordinal', true), ''), '0');
    IF (CASE WHEN ordinal_setting ~ '^[0-9]{1,10}$' THEN ordinal_setting::bigint >= 2147483647 ELSE true END) THEN
        RAISE EXCEPTION 'synchro: the setting synchro.dml_ordinal is not a registered-DML ordinal; only Synchro''s fence may set it'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    ordinal := ordinal_setting::integer + 1;

    -- Reserve the identity; the conflict update is skipped when the order check fails.
    INSERT INTO synchro.row_head AS h (relation_id, key, version, fence_xid, fence_ctid, fence_ordinal)
    VALUES (rid, key_text, new_version, xid, CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE NEW.ctid END, ordinal)
    ON CONFLICT (relation_id, key) DO UPDATE
        SET version = EXCLUDED.version, fence_xid = EXCLUDED.fence_xid, fence_ctid = EXCLUDED.fence_ctid,
            fence_ordinal = EXCLUDED.fence_ordinal
        WHERE h.fence_xid <> EXCLUDED.fence_xid
           OR (((TG_OP = 'INSERT' AND h.fence_ctid IS NULL) OR (TG_OP <> 'INSERT' AND h.fence_ctid = OLD.ctid))
               AND coalesce(h.fence_ordinal, 0) < EXCLUDED.fence_ordinal)
    RETURNING h.xmax = 0 INTO reserved;
    IF reserved IS NULL
       AND (SELECT h.fence_xid = xid AND coalesce(h.fence_ordinal, 0) >= ordinal FROM synchro.row_head h WHERE h.relation_id = rid AND h.key = key_text) THEN
        RAISE EXCEPTION 'synchro: the setting synchro.dml_ordinal was set back in this transaction, below the ordinal of an earlier fence of a row of %.%; only Synchro''s fence may set it',
            TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF reserved IS NULL THEN
        -- A table rewrite earlier in the transaction (which wrote the relation's
        -- pg_class row) moved the row, so its position no longer matches the one
        -- its previous fence recorded: say so, since that is the likelier cause.
        IF (SELECT ((c.xmin::text::bigint - xid::text::bigint) % 4294967296 + 4294967296) % 4294967296 < 2147483648
            FROM pg_class c WHERE c.oid = TG_RELID) THEN
            RAISE EXCEPTION 'synchro: % of a row of %.% fired its fence after a later change of the same row (a nested statement changed it first); fences of one row must follow its operations',
                TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
                USING ERRCODE = 'triggered_data_change_violation',
                      HINT = format('%I.%I was altered in this transaction after an earlier change of this row: a table rewrite '
                                    '(ALTER TABLE ... TYPE, a column with a volatile default, CLUSTER) moves every row, and the fence '
                                    'cannot order this row''s changes across it. Run the ALTER TABLE or CLUSTER in a transaction of its own.',
                                    TG_TABLE_SCHEMA, TG_TABLE_NAME);
        END IF;
        RAISE EXCEPTION 'synchro: % of a row of %.% fired its fence after a later change of the same row (a nested statement changed it first); fences of one row must follow its operations',
            TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'triggered_data_change_violation';
    END IF;
    IF TG_OP = 'INSERT' AND NOT reserved THEN
        -- A re-inserted key: a nested statement may have deleted the new row before
        -- this fence fired. (First inserts of a key skip this lookup.)
        EXECUTE format('SELECT EXISTS (SELECT FROM %I.%I WHERE ctid = $1)', TG_TABLE_SCHEMA, TG_TABLE_NAME)
            INTO live USING NEW.ctid;
        IF NOT live THEN
            RAISE EXCEPTION 'synchro: INSERT of a row of %.% fired its fence after a later change of the same row (a nested statement changed it first); fences of one row must follow its operations',
                TG_TABLE_SCHEMA, TG_TABLE_NAME
                USING ERRCODE = 'triggered_data_change_violation';
        END IF;
    END IF;

    PERFORM set_config('synchro.dml_ordinal', ordinal::text, true);

    push_client := nullif(current_setting('synchro.client_id', true), '');
    INSERT INTO synchro.fence (fence_id, relation_id, op, key, version, dml_ordinal, xid, client_id, mutation_id)
    VALUES (new_fence_id, rid, lower(TG_OP), key_text, new_version, ordinal, xid, push_client,
            nullif(current_setting('synchro.mutation_id', true), ''));
    IF push_client IS NOT NULL THEN
        -- The client's pulls wait until materialization reconciles it (synchro.capture_gate).
        INSERT INTO synchro.fence_pending (fence_id, client_id) VALUES (new_fence_id, push_client);
    END IF;

    -- The message leaves out old_key, new_key and table_id where they do not apply
    -- (json, not jsonb: it is only ever sent as text).
    PERFORM pg_logical_emit_message(true, 'synchro.fence', json_strip_nulls(json_build_object(
        'registration_kind', TG_ARGV[1],
        'relation_id', rid,
        'relation', json_build_object('schema', TG_ARGV[2], 'name', TG_ARGV[3], 'oid', TG_ARGV[4]::bigint),
        'op', lower(TG_OP),
        'version', new_version,
        'fence_id', new_fence_id,
        'ordinal', ordinal,
        'old_key', old_key,
        'new_key', new_key,
        'table_id', nullif(TG_ARGV[6], '')::integer))::text);
    RETURN NULL;
END
$$;
