-- +goose Up
-- Generated capture functions (docs/decisions.md, "Generated capture
-- functions"): the key guard and the fence of each registered relation run a
-- function of their own, synchro_capture.key_guard_<relation_id> and
-- synchro_capture.fence_<relation_id>, which the function bundle generates
-- with the registered identity compiled in (synchro.install_capture_functions),
-- instead of the generic synchro.key_guard() and synchro.fence(), which read
-- their trigger's arguments at every row. This converts the relations
-- registered before: each trigger running a generic function (and its clones
-- on partitions) runs a copy of it, under the relation's generated name, with
-- the same arguments; the function bundle installed next (synchroctl migrate
-- installs it in the same run) replaces the copies with the generated
-- functions and drops the generic ones. A trigger keeps its firing state
-- (ENABLE ALWAYS, or disabled: readiness reports that). A trigger running a
-- generic function on a relation that is not registered fails the migration.
-- Down returns every such trigger to the generic function (as the bundle
-- before this migration had it) and drops the schema.
CREATE SCHEMA synchro_capture;
REVOKE ALL ON SCHEMA synchro_capture FROM PUBLIC;

-- +goose StatementBegin
DO $$
DECLARE
    t record;
    fn text;
    restore text[];
    stmt text;
    path text := current_setting('search_path');
BEGIN
    -- pg_get_triggerdef then qualifies every name.
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    FOR t IN SELECT tg.oid, tg.tgname, tg.tgrelid, p.proname, p.prosrc, p.prosecdef, r.relation_id,
                    pg_get_triggerdef(tg.oid) AS def
             FROM pg_trigger tg
             JOIN pg_proc p ON p.oid = tg.tgfoid
             LEFT JOIN synchro.relation r ON r.relation_oid = tg.tgrelid
             WHERE tg.tgparentid = 0
               AND p.oid IN (to_regprocedure('synchro.fence()'), to_regprocedure('synchro.key_guard()'))
             ORDER BY tg.tgrelid, tg.tgname
    LOOP
        IF t.relation_id IS NULL THEN
            RAISE EXCEPTION 'synchro: trigger % on % runs synchro.%() but % is not registered; drop the trigger, then migrate',
                t.tgname, t.tgrelid::regclass, t.proname, t.tgrelid::regclass;
        END IF;
        fn := format('synchro_capture.%I', t.proname || '_' || t.relation_id);
        EXECUTE format('CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql %s SET search_path = pg_catalog, pg_temp AS %L',
                       fn, CASE WHEN t.prosecdef THEN 'SECURITY DEFINER' ELSE '' END, t.prosrc);
        EXECUTE format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', fn);
        -- CREATE OR REPLACE TRIGGER replaces the clones on partitions too, and
        -- makes every one fire on origin: the states are restored after, the
        -- relation's first (ALTER TABLE recurses to partitions), then each
        -- clone's.
        SELECT array_agg(format('ALTER TABLE %s %s TRIGGER %I', tg.tgrelid::regclass,
                                CASE tg.tgenabled WHEN 'A' THEN 'ENABLE ALWAYS' WHEN 'R' THEN 'ENABLE REPLICA'
                                                  WHEN 'D' THEN 'DISABLE' ELSE 'ENABLE' END,
                                tg.tgname)
                         ORDER BY tg.tgparentid <> 0, tg.tgrelid)
        INTO restore
        FROM pg_trigger tg WHERE tg.oid = t.oid OR tg.tgparentid = t.oid;
        EXECUTE regexp_replace(regexp_replace(t.def, '^CREATE TRIGGER ', 'CREATE OR REPLACE TRIGGER '),
                               ' EXECUTE FUNCTION synchro\.' || t.proname || '\((.*)\)$', ' EXECUTE FUNCTION ' || fn || '(\1)');
        FOREACH stmt IN ARRAY restore LOOP
            EXECUTE stmt;
        END LOOP;
    END LOOP;
    IF EXISTS (SELECT FROM pg_trigger tg
               WHERE tg.tgfoid IN (to_regprocedure('synchro.fence()'), to_regprocedure('synchro.key_guard()'))) THEN
        RAISE EXCEPTION 'synchro: a trigger still runs synchro.fence() or synchro.key_guard() after the conversion';
    END IF;
    PERFORM set_config('search_path', path, true);
END
$$;
-- +goose StatementEnd

-- +goose Down
-- The generic functions as the function bundle before this migration had them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION synchro.row_written_frozen(rel oid, t tid)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT v.all_frozen
            FROM synchro.pg_visibility_map(rel::pg_catalog.regclass,
                                           ((t::pg_catalog.text)::pg_catalog.point)[0]::pg_catalog.int8) v);
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
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
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION synchro.key_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- A copy of NEW (its tuple, TOAST pointers and all). Rendering a record
    -- (to_jsonb) detoasts its out-of-line values in place, and NEW returned
    -- so would be a rebuilt tuple whose large values PostgreSQL stores and
    -- logs again: a one-word update of a row with a 4 MB value wrote 4 MB of
    -- WAL. Returned untouched, NEW keeps them where they are.
    new_row record;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        new_row := NEW;
        IF to_jsonb(OLD) -> TG_ARGV[0] IS DISTINCT FROM to_jsonb(new_row) -> TG_ARGV[0] THEN
            RAISE EXCEPTION 'synchro: primary key change of registered relation %.% is not supported; delete and insert instead',
                TG_TABLE_SCHEMA, TG_TABLE_NAME
                USING ERRCODE = 'feature_not_supported';
        END IF;
        IF TG_ARGV[1] = 'partitioned' THEN
            PERFORM set_config('synchro.updating', TG_RELID::text || ':' || OLD.ctid::text, true);
        END IF;
        RETURN NEW;
    END IF;
    IF TG_ARGV[1] = 'partitioned'
       AND current_setting('synchro.updating', true) = TG_RELID::text || ':' || OLD.ctid::text THEN
        RAISE EXCEPTION 'synchro: moving a row of registered relation %.% to another partition changes its key; delete and insert instead',
            TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'feature_not_supported';
    END IF;
    RETURN OLD;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION synchro.row_written_frozen(oid, tid), synchro.fence(), synchro.key_guard() FROM PUBLIC;

-- +goose StatementBegin
DO $$
DECLARE
    t record;
    f regprocedure;
    restore text[];
    stmt text;
    path text := current_setting('search_path');
BEGIN
    -- pg_get_triggerdef then qualifies every name.
    PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
    FOR t IN SELECT tg.oid, tg.tgname, tg.tgrelid, pg_get_triggerdef(tg.oid) AS def
             FROM pg_trigger tg
             JOIN pg_proc p ON p.oid = tg.tgfoid
             WHERE tg.tgparentid = 0 AND p.pronamespace = 'synchro_capture'::regnamespace
             ORDER BY tg.tgrelid, tg.tgname
    LOOP
        SELECT array_agg(format('ALTER TABLE %s %s TRIGGER %I', tg.tgrelid::regclass,
                                CASE tg.tgenabled WHEN 'A' THEN 'ENABLE ALWAYS' WHEN 'R' THEN 'ENABLE REPLICA'
                                                  WHEN 'D' THEN 'DISABLE' ELSE 'ENABLE' END,
                                tg.tgname)
                         ORDER BY tg.tgparentid <> 0, tg.tgrelid)
        INTO restore
        FROM pg_trigger tg WHERE tg.oid = t.oid OR tg.tgparentid = t.oid;
        EXECUTE regexp_replace(regexp_replace(t.def, '^CREATE TRIGGER ', 'CREATE OR REPLACE TRIGGER '),
                               ' EXECUTE FUNCTION synchro_capture\.(fence|key_guard)_[0-9]+\((.*)\)$', ' EXECUTE FUNCTION synchro.\1(\2)');
        FOREACH stmt IN ARRAY restore LOOP
            EXECUTE stmt;
        END LOOP;
    END LOOP;
    -- Without CASCADE: a trigger still running one fails the rollback.
    FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'synchro_capture'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
    PERFORM set_config('search_path', path, true);
END
$$;
-- +goose StatementEnd
DROP SCHEMA synchro_capture;
