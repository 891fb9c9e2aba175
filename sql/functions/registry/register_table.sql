-- synchro.register_table: registers a synced relation and returns its immutable
-- logical table id. Validates the capture identity (synchro.capture_identity), the
-- options and the scope rule (synchro.compile_scope_rule), installs the fence
-- triggers, adds the relation to the publication and creates and activates a new
-- registry generation, all in the caller's transaction. A relation that holds
-- rows (or a dependency it registers that does) is served once its projection
-- bootstrap is activated (synchro.begin_bootstrap). Repeating an identical
-- call returns the same id and changes nothing; any other change to an existing
-- registration is rejected.
--
-- options: name (wire name, default the relation name), sync_columns or
-- exclude_columns (the key is always synced), push_policy (enabled | read_only),
-- updated_at_column, deleted_at_column; each that is not a list must be a string
-- when present. A wire name is unique ignoring case and does not start with
-- "_synchro_" or "sqlite_" (in any case): the client SDK stores each synced
-- table in SQLite under its wire name, where names compare ignoring case,
-- "sqlite_" is reserved and the SDK's own tables start with "_synchro_".
CREATE OR REPLACE FUNCTION synchro.register_table(relation regclass, scope_rule jsonb, options jsonb DEFAULT '{}')
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel oid := relation::oid;
    qname text := synchro.qualified_name(relation::oid);
    input jsonb := jsonb_build_object('scope_rule', scope_rule, 'options', options);
    existing record;
    ident record;
    wire_name text;
    all_cols name[];
    sync_cols name[];
    bad_col record;
    policy text;
    g bigint;
    compiled record;
    rid bigint;
    tid integer;
    time_col text;
    opt text;
BEGIN
    SELECT t.table_id, t.registered_input, r.registration_kind INTO existing
    FROM synchro.relation r LEFT JOIN synchro.synced_table t ON t.relation_id = r.relation_id
    WHERE r.relation_oid = rel;
    IF FOUND THEN
        IF existing.registration_kind <> 'synced' THEN
            RAISE EXCEPTION 'synchro: relation % rejected: it is registered as a capture dependency; promoting it to a synced table needs a controlled reconfiguration', qname
                USING ERRCODE = 'object_in_use';
        ELSIF existing.registered_input IS DISTINCT FROM input THEN
            RAISE EXCEPTION 'synchro: relation % rejected: it is already registered with a different scope rule or options; changing a registration needs a controlled reconfiguration', qname
                USING ERRCODE = 'object_in_use';
        END IF;
        RETURN existing.table_id;
    END IF;

    ident := synchro.capture_identity(rel);
    PERFORM synchro.check_keys(options, ARRAY['name', 'sync_columns', 'exclude_columns', 'push_policy',
                                              'updated_at_column', 'deleted_at_column'], rel, 'options');

    FOREACH opt IN ARRAY ARRAY['name', 'push_policy', 'updated_at_column', 'deleted_at_column'] LOOP
        IF options ? opt AND jsonb_typeof(options->opt) <> 'string' THEN
            RAISE EXCEPTION 'synchro: relation % rejected: options.% must be a string, not %', qname, opt, options->opt
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    wire_name := coalesce(options->>'name', (SELECT relname FROM pg_class WHERE oid = rel));
    IF wire_name !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: wire name "%" must be a letter or underscore followed by letters, digits or underscores (at most 63)', qname, wire_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF wire_name ~* '^(_synchro_|sqlite_)' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: wire name "%" may not start with "_synchro_" or "sqlite_" (in any case): clients keep their own tables under those names; pass options.name', qname, wire_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    all_cols := synchro.relation_columns(rel);
    IF options ? 'sync_columns' AND options ? 'exclude_columns' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: options sync_columns and exclude_columns are mutually exclusive', qname
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF options ? 'sync_columns' THEN
        sync_cols := synchro.check_columns(rel, synchro.text_array(options->'sync_columns', rel, 'options.sync_columns'), 'options.sync_columns');
    ELSIF options ? 'exclude_columns' THEN
        PERFORM synchro.check_columns(rel, synchro.text_array(options->'exclude_columns', rel, 'options.exclude_columns'), 'options.exclude_columns');
        IF ident.key_column = ANY (synchro.text_array(options->'exclude_columns', rel, 'options.exclude_columns')) THEN
            RAISE EXCEPTION 'synchro: relation % rejected: options.exclude_columns may not exclude the primary-key column "%"', qname, ident.key_column
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        sync_cols := ARRAY(SELECT c FROM unnest(all_cols) c
                           WHERE c <> ALL (synchro.text_array(options->'exclude_columns', rel, 'options.exclude_columns')));
    ELSE
        sync_cols := all_cols;
    END IF;
    -- The key is always synced; keep the relation's column order.
    sync_cols := ARRAY(SELECT c FROM unnest(all_cols) c WHERE c = ANY (sync_cols) OR c = ident.key_column);

    SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS typ INTO bad_col
    FROM pg_attribute a
    WHERE a.attrelid = rel AND a.attname = ANY (sync_cols) AND synchro.portable_type(a.atttypid) IS NULL
    ORDER BY a.attnum LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'synchro: relation % rejected: column "%" has type %, which has no portable type; exclude it or change its type', qname, bad_col.attname, bad_col.typ
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    policy := coalesce(options->>'push_policy', 'enabled');
    IF policy NOT IN ('enabled', 'read_only') THEN
        RAISE EXCEPTION 'synchro: relation % rejected: options.push_policy must be "enabled" or "read_only", not "%"', qname, policy
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH time_col IN ARRAY ARRAY['updated_at_column', 'deleted_at_column'] LOOP
        CONTINUE WHEN NOT options ? time_col;
        IF NOT (options->>time_col)::name = ANY (sync_cols) THEN
            RAISE EXCEPTION 'synchro: relation % rejected: options.% names "%", which is not a synced column', qname, time_col, options->>time_col
                USING ERRCODE = 'undefined_column';
        END IF;
        IF (SELECT synchro.portable_type(atttypid) FROM pg_attribute WHERE attrelid = rel AND attname = (options->>time_col)::name) <> 'datetime' THEN
            RAISE EXCEPTION 'synchro: relation % rejected: options.% column "%" must be a timestamp column', qname, time_col, options->>time_col
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    g := synchro.begin_registry_change('register_table ' || qname);
    compiled := synchro.compile_scope_rule(rel, scope_rule, g);
    rid := synchro.capture_relation(rel, 'synced', sync_cols || compiled.columns, g);
    -- Checked after capture_relation, so that relation drift (a dropped and recreated
    -- relation whose old registration still holds the wire name) is reported as such.
    IF EXISTS (SELECT FROM synchro.synced_table WHERE lower(name) = lower(wire_name)) THEN
        RAISE EXCEPTION 'synchro: relation % rejected: wire name "%" is already used by another registered table (wire names are compared ignoring case); pass options.name', qname, wire_name
            USING ERRCODE = 'duplicate_object';
    END IF;
    INSERT INTO synchro.synced_table (relation_id, name, scope_rule, sync_columns, push_policy,
                                      updated_at_column, deleted_at_column, registered_input)
    VALUES (rid, wire_name, compiled.normalized, sync_cols, policy,
            options->>'updated_at_column', options->>'deleted_at_column', input)
    RETURNING table_id INTO tid;
    PERFORM synchro.install_capture(rid);
    -- Rule evaluation finds rows by the columns path and members rules follow
    -- (the steps of a path, a members rule's with one too, walked backwards).
    IF compiled.normalized ->> 'kind' IN ('path', 'members') AND compiled.normalized ? 'path' THEN
        FOR i IN 0 .. jsonb_array_length(compiled.normalized -> 'path') - 1 LOOP
            PERFORM synchro.ensure_projection_index(
                CASE WHEN i = 0 THEN rid ELSE (compiled.normalized -> 'path' -> (i - 1) ->> 'relation_id')::bigint END,
                compiled.normalized -> 'path' -> i ->> 'column');
        END LOOP;
    END IF;
    IF compiled.normalized ->> 'kind' = 'members' THEN
        PERFORM synchro.ensure_projection_index((compiled.normalized ->> 'relation_id')::bigint, compiled.normalized ->> 'column');
    END IF;
    PERFORM synchro.begin_bootstrap(g);
    PERFORM synchro.activate_registry_generation(g);
    RETURN tid;
END
$$;
