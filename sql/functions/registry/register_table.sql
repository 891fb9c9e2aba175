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
-- options: see synchro.table_definition.
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
    def record;
    g bigint;
    compiled record;
    rid bigint;
    tid integer;
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
    def := synchro.table_definition(rel, ident.key_column, options);

    g := synchro.begin_registry_change('register_table ' || qname);
    compiled := synchro.compile_scope_rule(rel, scope_rule, g);
    rid := synchro.capture_relation(rel, 'synced', def.sync_columns || compiled.columns, g);
    -- Checked after capture_relation, so that relation drift (a dropped and recreated
    -- relation whose old registration still holds the wire name) is reported as such.
    PERFORM synchro.check_wire_name(rel, def.wire_name, NULL);
    INSERT INTO synchro.synced_table (relation_id, name, scope_rule, sync_columns, push_policy,
                                      updated_at_column, deleted_at_column, registered_input)
    VALUES (rid, def.wire_name, compiled.normalized, def.sync_columns, def.push_policy,
            def.updated_at_column, def.deleted_at_column, input)
    RETURNING table_id INTO tid;
    PERFORM synchro.install_capture(rid);
    PERFORM synchro.ensure_rule_indexes(rid, compiled.normalized);
    PERFORM synchro.begin_bootstrap(g);
    PERFORM synchro.activate_registry_generation(g);
    RETURN tid;
END
$$;
