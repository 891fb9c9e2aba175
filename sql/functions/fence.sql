-- synchro.fence: AFTER INSERT/UPDATE/DELETE row trigger of every registered relation
-- (argument: relation_id). For each row operation that occurs it
--   * rejects a key change (a later BEFORE trigger may have changed the key after
--     synchro.key_guard) and a row written frozen by COPY ... FREEZE (0A000);
--   * checks that the fences of one row identity fire in the order of its row
--     operations: when a nested statement changed the row after this operation
--     but fired its fence first, the transaction fails with 27000. The order state
--     is the command id of the last fenced tuple, kept in synchro.row_head for the
--     current transaction;
--   * locks the canonical identity reservation (synchro.row_head), allocates an
--     opaque version and a fence_id, increments the transaction-local
--     registered-DML ordinal (setting synchro.dml_ordinal), records the fence
--     (bound to the push mutation named by synchro.client_id and
--     synchro.mutation_id when set) and emits one transactional logical message
--     with prefix "synchro.fence" (ADR 001, "Write fences and opaque row versions").
-- It creates no pull-visible effect.
CREATE OR REPLACE FUNCTION synchro.fence()
RETURNS trigger
LANGUAGE plpgsql
-- Definer: writers of registered tables need no rights on the synchro schema, and
-- pg_logical_emit_message is reserved to privileged roles.
SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    r record;
    old_key jsonb;
    new_key jsonb;
    key_text text;
    current_cid cid;
    head synchro.row_head;
    xid xid8 := pg_current_xact_id();
    ordinal integer;
    new_version text := replace(gen_random_uuid()::text, '-', '');
    new_fence_id uuid := gen_random_uuid();
    msg jsonb;
BEGIN
    SELECT rr.*, t.table_id INTO r
    FROM synchro.relation rr LEFT JOIN synchro.synced_table t ON t.relation_id = rr.relation_id
    WHERE rr.relation_id = TG_ARGV[0]::bigint;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: fence trigger on %.% names unknown registration %', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF TG_OP <> 'INSERT' THEN
        old_key := to_jsonb(OLD) -> r.key_column;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        new_key := to_jsonb(NEW) -> r.key_column;
    END IF;
    IF coalesce(new_key, old_key) IS NULL THEN
        RAISE EXCEPTION 'synchro: registered key column "%" of %.% is missing (relation drift)', r.key_column, TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF TG_OP = 'UPDATE' AND old_key IS DISTINCT FROM new_key THEN
        RAISE EXCEPTION 'synchro: primary key change of registered relation %.% is not supported; delete and insert instead',
            TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF TG_OP = 'INSERT' AND synchro.row_written_frozen(TG_RELID, NEW.ctid) THEN
        RAISE EXCEPTION 'synchro: COPY ... FREEZE into registered relation %.% is not supported; a frozen row loses the command id the fence order check needs',
            TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'feature_not_supported';
    END IF;
    key_text := coalesce(new_key, old_key) #>> '{}';

    -- Order check: the row's current tuple, as this transaction sees it now.
    EXECUTE format('SELECT cmin FROM %I.%I WHERE %I = ($1).%I',
                   TG_TABLE_SCHEMA, TG_TABLE_NAME, r.key_column, r.key_column)
        INTO current_cid
        USING CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    SELECT * INTO head FROM synchro.row_head h
    WHERE h.relation_id = r.relation_id AND h.key = key_text
    FOR UPDATE;
    IF (TG_OP = 'DELETE' AND current_cid IS NOT NULL)
       OR (TG_OP <> 'DELETE' AND (current_cid IS NULL OR (head.fence_xid = xid AND head.fence_cid = current_cid))) THEN
        RAISE EXCEPTION 'synchro: % of a row of %.% fired its fence after a later change of the same row (a nested statement changed it first); fences of one row must follow its operations',
            TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'triggered_data_change_violation';
    END IF;

    INSERT INTO synchro.row_head AS h (relation_id, key, version, fence_xid, fence_cid)
    VALUES (r.relation_id, key_text, new_version, xid, current_cid)
    ON CONFLICT (relation_id, key) DO UPDATE
        SET version = EXCLUDED.version, fence_xid = EXCLUDED.fence_xid, fence_cid = EXCLUDED.fence_cid;

    ordinal := coalesce(nullif(current_setting('synchro.dml_ordinal', true), ''), '0')::integer + 1;
    PERFORM set_config('synchro.dml_ordinal', ordinal::text, true);

    INSERT INTO synchro.fence (fence_id, relation_id, op, key, version, dml_ordinal, xid, client_id, mutation_id)
    VALUES (new_fence_id, r.relation_id, lower(TG_OP), key_text, new_version, ordinal, xid,
            nullif(current_setting('synchro.client_id', true), ''),
            nullif(current_setting('synchro.mutation_id', true), ''));

    msg := jsonb_build_object(
        'registration_kind', r.registration_kind,
        'relation_id', r.relation_id,
        'relation', jsonb_build_object('schema', r.schema_name, 'name', r.relation_name, 'oid', r.relation_oid::bigint),
        'op', lower(TG_OP),
        'version', new_version,
        'fence_id', new_fence_id,
        'ordinal', ordinal);
    IF old_key IS NOT NULL THEN
        msg := msg || jsonb_build_object('old_key', old_key);
    END IF;
    IF new_key IS NOT NULL THEN
        msg := msg || jsonb_build_object('new_key', new_key);
    END IF;
    IF r.table_id IS NOT NULL THEN
        msg := msg || jsonb_build_object('table_id', r.table_id);
    END IF;
    PERFORM pg_logical_emit_message(true, 'synchro.fence', msg::text);
    RETURN NULL;
END
$$;
