-- synchro.register_dependency: registers a capture-only relation that scope rules
-- read, and returns its immutable relation_id. Same identity validation, triggers
-- and publication membership as a synced table, but no client-visible table id;
-- a relation that holds rows is bootstrapped (synchro.begin_bootstrap) before
-- rules may read it.
-- options: columns (captured columns, default all; the key is always captured).
-- Registering an already captured relation returns its id when it captures the
-- requested columns.
CREATE OR REPLACE FUNCTION synchro.register_dependency(relation regclass, options jsonb DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel oid := relation::oid;
    cols name[];
    rid bigint;
    g bigint;
BEGIN
    PERFORM synchro.check_keys(options, ARRAY['columns'], rel, 'options');
    cols := CASE WHEN options ? 'columns'
                 THEN synchro.check_columns(rel, synchro.text_array(options->'columns', rel, 'options.columns'), 'options.columns')
                 ELSE synchro.relation_columns(rel) END;
    SELECT relation_id INTO rid FROM synchro.relation WHERE relation_oid = rel;
    IF FOUND THEN
        RETURN synchro.dependency_relation(rel, cols, NULL, 'register_dependency');
    END IF;
    PERFORM synchro.capture_identity(rel);
    g := synchro.begin_registry_change('register_dependency ' || synchro.qualified_name(rel));
    rid := synchro.capture_relation(rel, 'capture_dependency', cols, g);
    PERFORM synchro.install_capture(rid);
    PERFORM synchro.begin_bootstrap(g);
    PERFORM synchro.activate_registry_generation(g);
    RETURN rid;
END
$$;
