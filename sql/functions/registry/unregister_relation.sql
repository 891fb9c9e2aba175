-- synchro.unregister_relation: the unregistration of registered relation rid
-- (synchro.unregister_table, synchro.unregister_dependency, whose call names
-- context): refused (55006) while another synced table's scope rule reads it;
-- a new registry generation, its capture removed (synchro.remove_capture), and
-- a change the capture worker activates at this transaction
-- (synchro.record_registry_change, op unregister), whose id it returns.
CREATE OR REPLACE FUNCTION synchro.unregister_relation(rid bigint, context text)
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.relation;
    reader text;
    g bigint;
BEGIN
    SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
    SELECT string_agg(t.name, ', ' ORDER BY t.name) INTO reader
    FROM synchro.rule_read rr JOIN synchro.synced_table t ON t.table_id = rr.table_id
    WHERE rr.relation_id = rid AND t.relation_id <> rid;
    IF reader IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: %.% is read by the scope rule of %: reconfigure or unregister that table first', r.schema_name, r.relation_name, reader
            USING ERRCODE = 'object_in_use';
    END IF;
    g := synchro.begin_registry_change(context || ' ' || r.schema_name || '.' || r.relation_name);
    PERFORM synchro.remove_capture(rid);
    PERFORM synchro.activate_registry_generation(g);
    RETURN synchro.record_registry_change('{}', jsonb_build_object(
        'op', 'unregister', 'relation', r.schema_name || '.' || r.relation_name, 'relation_id', rid));
END
$$;
