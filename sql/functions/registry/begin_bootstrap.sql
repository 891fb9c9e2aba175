-- synchro.begin_bootstrap: called by a registration (register_table,
-- register_dependency) in its own transaction, after the relations of registry
-- generation g are captured and before g is activated. When one of them holds
-- a row (the registration's lock, taken by synchro.capture_relation, keeps
-- writers out until the registering transaction commits), every relation of g
-- becomes bootstrap_pending and a bootstrap is recorded for them: a
-- stream_reset of kind bootstrap in phase staging, whose coordinator (synchrod,
-- or synchroctl bootstrap run) stages their rows and whose activation by the
-- capture worker serves them (docs/change-stream.md, "Projection bootstrap").
-- Until then their row events are held out of the active stream, their synced
-- tables are not in the schema manifest and pushes to them are answered retry.
-- Returns the bootstrap's id, NULL when every relation of g is empty. Refused
-- (55006) while a stream reset is in progress (synchro.record_registry_change).
CREATE OR REPLACE FUNCTION synchro.begin_bootstrap(g bigint)
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel synchro.relation;
    populated boolean := false;
BEGIN
    FOR rel IN SELECT * FROM synchro.relation r WHERE r.generation = g ORDER BY r.relation_id LOOP
        EXECUTE format('SELECT EXISTS (SELECT FROM %I.%I)', rel.schema_name, rel.relation_name) INTO populated;
        EXIT WHEN populated;
    END LOOP;
    IF NOT populated THEN
        RETURN NULL;
    END IF;
    UPDATE synchro.relation r SET bootstrap_pending = true WHERE r.generation = g;
    RETURN synchro.record_bootstrap();
END
$$;
