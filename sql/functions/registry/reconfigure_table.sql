-- synchro.reconfigure_table: changes synced table relation's scope rule and
-- options (validated as synchro.register_table validates them: options in
-- synchro.table_definition, the rule by synchro.compile_scope_rule) as a new
-- registry generation, in the caller's transaction, and returns the id of the
-- change (synchro.record_registry_change). The table keeps being served under
-- its current definition until the capture worker activates the change in
-- source order (synchro.activate_bootstrap): from then on its rows are
-- evaluated under the new rule, carry the new synced columns, and every scope
-- that gains or loses rows of it is rebuilt by its clients (a scope floor).
-- Columns the new definition captures and the current one does not (a column
-- added to the table since registration, one a new rule reads) came without
-- row events for the rows that already hold them; so did the values of a
-- captured column whose type changed (ALTER COLUMN ... TYPE): they are captured
-- from this transaction on, and the table's projection is bootstrapped (staged
-- from a snapshot) before the change activates; so is a populated relation the
-- new rule registers. The relation's current identity and storage are recorded
-- again (a renamed relation, a rewrite of its columns). While capture is
-- blocked (relation drift is), the change is applied to the registry at once
-- and takes effect with the stream reset that recovers capture (NULL is
-- returned; a notice says so). Refused: a relation that
-- is not a synced table (42704), one waiting for its bootstrap, or while another
-- registry change, reset or bootstrap is in progress (55006).
CREATE OR REPLACE FUNCTION synchro.reconfigure_table(relation regclass, scope_rule jsonb, options jsonb DEFAULT '{}')
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel oid := relation::oid;
    qname text := synchro.qualified_name(relation::oid);
    t synchro.synced_table;
    r synchro.relation;
    ident record;
    def record;
    g bigint;
    compiled record;
    captured name[];
    added boolean;
    staged bigint[];
    definition jsonb;
BEGIN
    SELECT x.* INTO r FROM synchro.relation x WHERE x.relation_oid = rel;
    SELECT x.* INTO t FROM synchro.synced_table x WHERE x.relation_id = r.relation_id;
    IF t.table_id IS NULL THEN
        RAISE EXCEPTION 'synchro: relation % is not a registered synced table', qname
            USING ERRCODE = 'undefined_object';
    END IF;
    ident := synchro.capture_identity(rel);
    IF ident.key_column <> r.key_column THEN
        RAISE EXCEPTION 'synchro: relation % rejected: its key is now "%", registered as "%"; a changed key needs unregister_table and register_table',
            qname, ident.key_column, r.key_column
            USING ERRCODE = 'object_in_use';
    END IF;
    def := synchro.table_definition(rel, ident.key_column, options);
    g := synchro.begin_registry_change('reconfigure_table ' || qname);
    compiled := synchro.compile_scope_rule(rel, scope_rule, g);
    PERFORM synchro.check_wire_name(rel, def.wire_name, t.table_id);
    captured := ARRAY(SELECT DISTINCT c FROM unnest(def.sync_columns || compiled.columns || ident.key_column) c ORDER BY c);
    -- A column newly captured, or a captured one whose type changed (its
    -- values in existing rows would keep their old rendering): restaged.
    added := EXISTS (SELECT FROM unnest(captured) c WHERE c <> ALL (r.columns))
             OR EXISTS (SELECT FROM unnest(r.columns, r.column_types) u(col, typ)
                        JOIN pg_attribute a ON a.attrelid = rel AND a.attname = u.col AND a.attnum > 0 AND NOT a.attisdropped
                        WHERE a.atttypid <> u.typ);

    -- Captured from here on (the worker renders decoded rows by them from
    -- this generation on); the relation's identity as it is now.
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', rel::regclass);
    UPDATE synchro.relation x
    SET (schema_name, relation_name, key_type, columns, column_types, column_attnums) =
        (SELECT n.nspname, c.relname, ident.key_type, array_agg(a.attname ORDER BY a.attname),
                array_agg(a.atttypid ORDER BY a.attname), array_agg(a.attnum ORDER BY a.attname)
         FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = ANY (captured)
         WHERE c.oid = rel
         GROUP BY n.nspname, c.relname)
    WHERE x.relation_id = r.relation_id;
    PERFORM synchro.record_storage(r.relation_id, true);
    PERFORM synchro.record_enum_labels(r.relation_id);
    PERFORM synchro.remove_capture(r.relation_id);
    PERFORM synchro.install_capture(r.relation_id);
    PERFORM synchro.ensure_rule_indexes(r.relation_id, compiled.normalized);

    definition := jsonb_build_object(
        'name', def.wire_name, 'scope_rule', compiled.normalized, 'sync_columns', def.sync_columns,
        'push_policy', def.push_policy, 'updated_at_column', def.updated_at_column,
        'deleted_at_column', def.deleted_at_column,
        'registered_input', jsonb_build_object('scope_rule', scope_rule, 'options', options));
    PERFORM synchro.activate_registry_generation(g);
    -- Capture blocked (a poison transaction, relation drift): the worker
    -- would never reach this change; the stream reset that recovers capture
    -- stages every relation under the registry as it is when it begins.
    IF EXISTS (SELECT FROM synchro.poison_txn p JOIN synchro.progress s USING (stream_generation) WHERE p.resolved_at IS NULL) THEN
        PERFORM synchro.apply_table_definition(t.table_id, definition);
        RAISE NOTICE 'synchro: capture is blocked: the reconfiguration of % is applied to the registry now and takes effect with the stream reset that recovers capture (synchroctl reset start --activate)', qname;
        RETURN NULL;
    END IF;
    -- What the new generation reads that the active projections lack.
    UPDATE synchro.relation x SET bootstrap_pending = true WHERE x.generation = g AND x.relation_id <> r.relation_id;
    staged := ARRAY(SELECT x.relation_id FROM synchro.relation x WHERE x.generation = g AND x.relation_id <> r.relation_id
                    ORDER BY x.relation_id)
              || CASE WHEN added THEN ARRAY[r.relation_id] ELSE '{}' END;
    RETURN synchro.record_registry_change(staged, jsonb_build_object(
        'op', 'reconfigure', 'relation', qname, 'table_id', t.table_id, 'definition', definition));
END
$$;
