-- synchro.apply_mutation: applies one push mutation for client c (user_id, its
-- assigned scopes) in its own savepoint and returns its outcome; a rejected
-- mutation writes nothing, undoes no other and holds no lock. It validates table,
-- key and columns (a JSON value not in its column's wire form is
-- validation_failed, never coerced: synchro.wire_type_error), locks the live row,
-- checks base_version (compare-and-swap on the row's opaque version) and the
-- write policy (synchro.write_allowed) before and after the write, checks what
-- materialization will evaluate (synchro.materializable_scopes), and binds the
-- fence to the client and mutation (synchro.client_id / synchro.mutation_id).
-- Outcomes: applied; conflict (version_conflict with server_version and
-- server_row; a row outside the user's scopes answers as a missing one);
-- rejected (policy_rejected, validation_failed, table_not_synced; deferred
-- constraints are checked within the mutation); retry (server_retryable: lock
-- timeout, deadlock, serialization failure, an insert that lost a race, a
-- table waiting for its projection bootstrap). A table
-- that no longer matches its registration refuses the whole push (503 not_ready).
-- Messages name a column or constraint, never a value. No pull-visible effect.
CREATE OR REPLACE FUNCTION synchro.apply_mutation(c synchro.client, user_id text, m jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
-- Every rule it evaluates (the policy, the answer's visibility) reads the rows
-- its transaction sees, sql rules included (synchro.projected): never state
-- older than the push's snapshot.
SET synchro.rule_reads = 'live'
AS $$
DECLARE
    requested text := m ->> 'op';
    op text := requested;
    t synchro.synced_table;
    r synchro.relation;
    head jsonb := jsonb_build_object('mutation_id', m ->> 'mutation_id', 'table', m ->> 'table', 'pk', m -> 'pk');
    pkv jsonb;
    key_text text;
    key_type text;
    cols jsonb := coalesce(nullif(m -> 'columns', 'null'), '{}');
    full_row jsonb;
    col text;
    collist text;
    before jsonb;
    after jsonb;
    current_version text;
    base text := m ->> 'base_version';
    detail text;
    state text;
    scopes text[];
    visible boolean;
    hidden boolean;
    conflict jsonb;
    only_kw text;
BEGIN
    SELECT * INTO t FROM synchro.synced_table WHERE name = m ->> 'table';
    IF NOT FOUND THEN
        RETURN head || jsonb_build_object('status', 'rejected', 'code', 'table_not_synced', 'message', 'the table is not synced');
    END IF;
    SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = t.relation_id;
    IF r.bootstrap_pending THEN
        RETURN head || jsonb_build_object('status', 'retry', 'code', 'server_retryable',
                                          'message', 'the table is being bootstrapped; send the mutation again later');
    END IF;
    IF t.push_policy = 'read_only' THEN
        RETURN head || jsonb_build_object('status', 'rejected', 'code', 'policy_rejected', 'message', 'the table is read-only');
    END IF;

    -- Key and columns.
    pkv := m -> 'pk' -> r.key_column;
    IF jsonb_typeof(m -> 'pk') IS DISTINCT FROM 'object' OR pkv IS NULL
       OR (SELECT count(*) FROM jsonb_object_keys(m -> 'pk')) <> 1 THEN
        detail := format('pk must be an object with exactly the key column "%s"', r.key_column);
    ELSIF (r.key_type = 'string' AND jsonb_typeof(pkv) <> 'string')
       OR (r.key_type <> 'string' AND (jsonb_typeof(pkv) <> 'number' OR pkv::text !~ '^-?[0-9]{1,19}$')) THEN
        detail := format('pk column "%s" must be %s', r.key_column,
                         CASE WHEN r.key_type = 'string' THEN 'a string' ELSE 'an integer' END);
    ELSIF octet_length(pkv #>> '{}') > synchro.max_key_bytes() THEN
        detail := format('pk column "%s" is longer than %s bytes', r.key_column, synchro.max_key_bytes());
    ELSIF jsonb_typeof(cols) IS DISTINCT FROM 'object' THEN
        detail := 'columns must be an object';
    ELSE
        SELECT format('column "%s" is not a synced column of the table', k) INTO detail
        FROM jsonb_object_keys(cols) k WHERE k <> ALL (t.sync_columns::text[]) ORDER BY k LIMIT 1;
        IF detail IS NULL AND cols ? r.key_column AND cols -> r.key_column <> pkv THEN
            detail := format('column "%s" is the key and must equal pk', r.key_column);
        ELSIF detail IS NULL AND op = 'update' AND (cols - r.key_column::text) = '{}' THEN
            detail := 'an update needs at least one column';
        ELSIF detail IS NULL THEN
            -- Each value in its portable type's wire form, never coerced.
            detail := synchro.wire_type_error(r.relation_oid, cols);
        END IF;
    END IF;
    IF detail IS NOT NULL THEN
        RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed', 'message', detail);
    END IF;
    key_text := pkv #>> '{}';
    -- Wire values to column input: bytes travel as base64. decode() skips
    -- padding anywhere ("AA=A" is a zero byte): the padding may only end it.
    FOR col IN SELECT a.attname FROM pg_attribute a
               WHERE a.attrelid = r.relation_oid AND a.atttypid = 'bytea'::regtype AND cols ? a.attname
                 AND jsonb_typeof(cols -> a.attname::text) = 'string' LOOP
        BEGIN
            IF (cols ->> col) ~ '=.*[^=[:space:]]' THEN
                RAISE invalid_parameter_value;
            END IF;
            cols := jsonb_set(cols, ARRAY[col], to_jsonb('\x' || encode(decode(cols ->> col, 'base64'), 'hex')));
        EXCEPTION WHEN data_exception THEN
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed',
                                              'message', format('column "%s" must be base64', col));
        END;
    END LOOP;
    full_row := cols || jsonb_build_object(r.key_column, pkv);

    BEGIN
        -- The statements below name the table: the registered relation must
        -- still carry its registered name and key column, or they would write
        -- whatever table took the name over (a schema renamed and another
        -- created in its place), where no fence fires. The key's type without
        -- its modifier: a cast to varchar(5) would cut a longer key to another
        -- row's. Rows of a table's inheritance children are not the synced
        -- table's (never captured; synchro.catalog_drift reports such a
        -- child): ONLY.
        SELECT format_type(a.atttypid, NULL), CASE WHEN pc.relkind = 'r' THEN 'ONLY ' ELSE '' END
        INTO key_type, only_kw
        FROM pg_class pc
        JOIN pg_namespace n ON n.oid = pc.relnamespace
        JOIN pg_attribute a ON a.attrelid = pc.oid AND a.attname = r.key_column AND NOT a.attisdropped
        WHERE pc.oid = r.relation_oid AND n.nspname = r.schema_name AND pc.relname = r.relation_name;
        IF key_type IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'undefined_table';
        END IF;
        EXECUTE format('SELECT to_jsonb(x) FROM %s%I.%I x WHERE x.%I = $1::%s FOR UPDATE', only_kw, r.schema_name, r.relation_name, r.key_column, key_type)
            INTO before USING key_text;
        IF before IS NOT NULL THEN
            -- The key as the fence renders it (row_head's key): a uuid in lower
            -- case with hyphens, an integer without leading zeros.
            key_text := before ->> r.key_column;
            current_version := (SELECT h.version FROM synchro.row_head h WHERE h.relation_id = r.relation_id AND h.key = key_text);
        END IF;
        IF op = 'upsert' THEN
            op := CASE WHEN before IS NULL THEN 'insert' ELSE 'update' END;
        END IF;
        -- The policy before the conflict check: a conflict answers with the
        -- current row, which only a user allowed to see it may get. A refusal
        -- or a conflict raises, so that the savepoint's rollback releases the
        -- row lock taken above instead of holding it until the push commits.
        -- An update or delete of a row the user may not write is answered as
        -- one of a row that does not exist, so that probing keys outside the
        -- user's scopes tells nothing. (An insert or upsert of a taken key
        -- cannot hide that it is taken: policy_rejected.)
        hidden := NOT synchro.write_allowed(t, user_id, c.scope_set, op, key_text, before, NULL, 'before');
        IF hidden AND requested NOT IN ('update', 'delete') THEN
            RAISE EXCEPTION USING ERRCODE = 'SYPOL';
        END IF;
        IF hidden OR (op = 'insert' AND before IS NOT NULL) OR (op <> 'insert' AND before IS NULL)
           OR (requested <> 'insert' AND base IS NOT NULL AND base IS DISTINCT FROM current_version) THEN
            -- (A registered policy may allow writing rows outside the user's
            -- scopes: the row and its version go back only when it is in one.)
            visible := NOT hidden AND before IS NOT NULL
                       AND EXISTS (SELECT FROM synchro.scopes_of(t.scope_rule, key_text, before, true) s WHERE s = ANY (c.scope_set));
            conflict := head || jsonb_build_object('status', 'conflict', 'code', 'version_conflict',
                'message', CASE WHEN before IS NULL OR hidden THEN 'the row does not exist' WHEN op = 'insert' THEN 'the row already exists'
                                ELSE 'base_version is not the current version' END,
                'server_version', CASE WHEN visible THEN current_version END,
                'server_row_text', CASE WHEN visible THEN synchro.row_text(t, key_text) END);
            RAISE EXCEPTION USING ERRCODE = 'SYCON';
        END IF;

        PERFORM set_config('synchro.client_id', c.client_id, true), set_config('synchro.mutation_id', m ->> 'mutation_id', true);
        SELECT string_agg(format('%I', k), ', ') INTO collist FROM jsonb_object_keys(full_row) k;
        IF op = 'insert' THEN
            EXECUTE format('INSERT INTO %1$I.%2$I (%3$s) SELECT %3$s FROM jsonb_populate_record(NULL::%1$I.%2$I, $1)',
                           r.schema_name, r.relation_name, collist) USING full_row;
        ELSIF op = 'update' THEN
            SELECT string_agg(format('%I', k), ', ') INTO collist FROM jsonb_object_keys(cols - r.key_column::text) k;
            -- (An upsert of an existing row that names its key only changes nothing.)
            IF collist IS NOT NULL THEN
                EXECUTE format('UPDATE %6$s%1$I.%2$I x SET (%3$s) = (SELECT %3$s FROM jsonb_populate_record(NULL::%1$I.%2$I, $1)) WHERE x.%4$I = $2::%5$s',
                               r.schema_name, r.relation_name, collist, r.key_column, key_type, only_kw) USING cols, key_text;
            END IF;
        ELSE
            EXECUTE format('DELETE FROM %s%I.%I x WHERE x.%I = $1::%s', only_kw, r.schema_name, r.relation_name, r.key_column, key_type) USING key_text;
        END IF;
        -- Constraints and constraint triggers the table declares INITIALLY
        -- DEFERRED are checked now, inside this mutation's savepoint: at the
        -- push's commit a violation would fail every mutation of the push (a
        -- 500 the client would retry for good). From here on the push's
        -- transaction checks them at the end of each statement.
        SET CONSTRAINTS ALL IMMEDIATE;
        IF op <> 'delete' THEN
            EXECUTE format('SELECT to_jsonb(x) FROM %s%I.%I x WHERE x.%I = $1::%s', only_kw, r.schema_name, r.relation_name, r.key_column, key_type)
                INTO after USING key_text;
            key_text := coalesce(after ->> r.key_column, key_text);
        END IF;
        -- Nothing materialization will evaluate for this write may fail or
        -- give a scope id too long: it would block capture for every client.
        -- (Checked ahead of the policy, which evaluates the same rules.)
        -- The row's scopes after the write (a delete: before it) decide below
        -- whether the answer carries the row.
        scopes := synchro.materializable_scopes(t, key_text, before, after);
        IF NOT synchro.write_allowed(t, user_id, c.scope_set, op, key_text, before, after, 'after') THEN
            RAISE EXCEPTION USING ERRCODE = 'SYPOL';
        END IF;
        IF after IS NULL THEN
            scopes := ARRAY(SELECT s FROM synchro.scopes_of(t.scope_rule, key_text, before, true) s);
        END IF;
        -- A registered policy may allow a write that leaves (or stays) outside
        -- the user's scopes: the row and its version go back only when it is in one.
        visible := scopes && c.scope_set;
        RETURN head || jsonb_build_object('status', 'applied',
            'server_version', CASE WHEN visible THEN (SELECT h.version FROM synchro.row_head h WHERE h.relation_id = r.relation_id AND h.key = key_text) END,
            'server_row_text', CASE WHEN visible THEN synchro.row_text(t, key_text) END);
    EXCEPTION
        WHEN SQLSTATE 'SYCON' THEN
            RETURN conflict;
        WHEN SQLSTATE 'SYPOL' THEN
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'policy_rejected',
                                              'message', 'the row is not in a scope assigned to this user');
        WHEN SQLSTATE 'SYCAP' THEN
            GET STACKED DIAGNOSTICS detail = MESSAGE_TEXT;
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed', 'message', detail);
        WHEN not_null_violation THEN
            GET STACKED DIAGNOSTICS detail = COLUMN_NAME;
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed',
                                              'message', format('column "%s" must not be null', detail));
        WHEN integrity_constraint_violation THEN
            GET STACKED DIAGNOSTICS detail = CONSTRAINT_NAME, state = RETURNED_SQLSTATE;
            -- An insert (or upsert) that found no row lost a race with another
            -- transaction inserting the key, which it waited for: not the
            -- client's mistake. Its retry sees that row (a version_conflict, or
            -- an upsert's update).
            IF state = '23505' AND op = 'insert' AND synchro.row_text(t, key_text) IS NOT NULL THEN
                RETURN head || jsonb_build_object('status', 'retry', 'code', 'server_retryable',
                                                  'message', 'the row was inserted concurrently; retry the mutation');
            END IF;
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed',
                                              'message', format('constraint "%s" is violated', detail));
        WHEN data_exception THEN
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed',
                                              'message', synchro.invalid_column(r, full_row));
        WHEN generated_always THEN
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed',
                                              'message', 'a column of the row is generated by the database and cannot be written');
        WHEN program_limit_exceeded THEN
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed',
                                              'message', 'a value is too large for the table or one of its indexes');
        WHEN feature_not_supported OR raise_exception OR triggered_data_change_violation THEN
            RETURN head || jsonb_build_object('status', 'rejected', 'code', 'validation_failed',
                                              'message', 'the change was refused by a rule of the table');
        WHEN undefined_table OR undefined_column THEN
            -- The table no longer matches its registration (it, its key or a
            -- synced column renamed or dropped): relation drift, which
            -- readiness reports and which blocks capture until repaired. The
            -- whole push is refused, as while capture is not ready. Where the
            -- table does match, the error is not drift: raised as it is.
            IF EXISTS (SELECT FROM pg_class pc JOIN pg_namespace n ON n.oid = pc.relnamespace
                       WHERE pc.oid = r.relation_oid AND n.nspname = r.schema_name AND pc.relname = r.relation_name)
               AND NOT EXISTS (SELECT FROM unnest(r.columns) u(col)
                               WHERE NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = r.relation_oid
                                                 AND a.attname = u.col AND a.attnum > 0 AND NOT a.attisdropped)) THEN
                RAISE;
            END IF;
            PERFORM synchro.refuse(503, 'not_ready', 'a synced table no longer matches its registration; retry later');
        WHEN lock_not_available OR deadlock_detected OR serialization_failure THEN
            RETURN head || jsonb_build_object('status', 'retry', 'code', 'server_retryable',
                                              'message', 'the row is busy; retry the mutation');
    END;
END
$$;
