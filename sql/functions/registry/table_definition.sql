-- synchro.table_definition: validates a synced table's options for relation
-- rel (key column key_col) and returns what they define: the wire name, the
-- synced columns (the key always; in the relation's column order), the push
-- policy and the time columns. options: name (wire name, default the
-- relation name), sync_columns or exclude_columns, push_policy (enabled |
-- read_only), updated_at_column, deleted_at_column; each that is not a list
-- must be a string when present. A wire name is a letter or underscore
-- followed by letters, digits or underscores, and does not start with
-- "_synchro_" or "sqlite_" (in any case): the client SDK stores each synced
-- table in SQLite under its wire name, where "sqlite_" is reserved and the
-- SDK's own tables start with "_synchro_". Registration and reconfiguration
-- (synchro.register_table, synchro.reconfigure_table) validate through it.
CREATE OR REPLACE FUNCTION synchro.table_definition(rel oid, key_col name, options jsonb,
                                                   OUT wire_name text, OUT sync_columns name[], OUT push_policy text,
                                                   OUT updated_at_column name, OUT deleted_at_column name)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    all_cols name[];
    sync_cols name[];
    bad_col record;
    policy text;
    time_col text;
    opt text;
BEGIN
    PERFORM synchro.check_keys(options, ARRAY['name', 'sync_columns', 'exclude_columns', 'push_policy',
                                              'updated_at_column', 'deleted_at_column'], rel, 'options');

    FOREACH opt IN ARRAY ARRAY['name', 'push_policy', 'updated_at_column', 'deleted_at_column'] LOOP
        IF options ? opt AND jsonb_typeof(options->opt) <> 'string' THEN
            RAISE EXCEPTION 'synchro: relation % rejected: options.% must be a string, not %', synchro.qualified_name(rel), opt, options->opt
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    wire_name := coalesce(options->>'name', (SELECT relname FROM pg_class WHERE oid = rel));
    IF wire_name !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: wire name "%" must be a letter or underscore followed by letters, digits or underscores (at most 63)', synchro.qualified_name(rel), wire_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF wire_name ~* '^(_synchro_|sqlite_)' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: wire name "%" may not start with "_synchro_" or "sqlite_" (in any case): clients keep their own tables under those names; pass options.name', synchro.qualified_name(rel), wire_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    all_cols := synchro.relation_columns(rel);
    IF options ? 'sync_columns' AND options ? 'exclude_columns' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: options sync_columns and exclude_columns are mutually exclusive', synchro.qualified_name(rel)
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF options ? 'sync_columns' THEN
        sync_cols := synchro.check_columns(rel, synchro.text_array(options->'sync_columns', rel, 'options.sync_columns'), 'options.sync_columns');
    ELSIF options ? 'exclude_columns' THEN
        PERFORM synchro.check_columns(rel, synchro.text_array(options->'exclude_columns', rel, 'options.exclude_columns'), 'options.exclude_columns');
        IF key_col = ANY (synchro.text_array(options->'exclude_columns', rel, 'options.exclude_columns')) THEN
            RAISE EXCEPTION 'synchro: relation % rejected: options.exclude_columns may not exclude the primary-key column "%"', synchro.qualified_name(rel), key_col
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        sync_cols := ARRAY(SELECT c FROM unnest(all_cols) c
                           WHERE c <> ALL (synchro.text_array(options->'exclude_columns', rel, 'options.exclude_columns')));
    ELSE
        sync_cols := all_cols;
    END IF;
    -- The key is always synced; keep the relation's column order.
    sync_cols := ARRAY(SELECT c FROM unnest(all_cols) c WHERE c = ANY (sync_cols) OR c = key_col);

    SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS typ INTO bad_col
    FROM pg_attribute a
    WHERE a.attrelid = rel AND a.attname = ANY (sync_cols) AND synchro.portable_type(a.atttypid) IS NULL
    ORDER BY a.attnum LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'synchro: relation % rejected: column "%" has type %, which has no portable type; exclude it or change its type', synchro.qualified_name(rel), bad_col.attname, bad_col.typ
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    policy := coalesce(options->>'push_policy', 'enabled');
    IF policy NOT IN ('enabled', 'read_only') THEN
        RAISE EXCEPTION 'synchro: relation % rejected: options.push_policy must be "enabled" or "read_only", not "%"', synchro.qualified_name(rel), policy
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH time_col IN ARRAY ARRAY['updated_at_column', 'deleted_at_column'] LOOP
        CONTINUE WHEN NOT options ? time_col;
        IF NOT (options->>time_col)::name = ANY (sync_cols) THEN
            RAISE EXCEPTION 'synchro: relation % rejected: options.% names "%", which is not a synced column', synchro.qualified_name(rel), time_col, options->>time_col
                USING ERRCODE = 'undefined_column';
        END IF;
        IF (SELECT synchro.portable_type(atttypid) FROM pg_attribute WHERE attrelid = rel AND attname = (options->>time_col)::name) <> 'datetime' THEN
            RAISE EXCEPTION 'synchro: relation % rejected: options.% column "%" must be a timestamp column', synchro.qualified_name(rel), time_col, options->>time_col
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    sync_columns := sync_cols;
    push_policy := policy;
    updated_at_column := options->>'updated_at_column';
    deleted_at_column := options->>'deleted_at_column';
END
$$;
