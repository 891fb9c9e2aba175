-- synchro.dependency_relation: the relation_id under which a relation's projection
-- holds the given columns, registering it as a capture dependency (all columns)
-- under generation g when it is not registered yet. An existing registration that
-- does not capture every needed column is rejected.
CREATE OR REPLACE FUNCTION synchro.dependency_relation(rel oid, needed name[], g bigint, context text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.relation;
    missing name;
BEGIN
    SELECT * INTO r FROM synchro.relation WHERE relation_oid = rel;
    IF NOT FOUND THEN
        PERFORM synchro.check_columns(rel, needed, context);
        r.relation_id := synchro.capture_relation(rel, 'capture_dependency', synchro.relation_columns(rel), g);
        PERFORM synchro.install_capture(r.relation_id);
        RETURN r.relation_id;
    END IF;
    SELECT n INTO missing FROM unnest(needed) n WHERE n <> ALL (r.columns) LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: %: column "%" of relation % is not captured by its registration',
            context, missing, synchro.qualified_name(rel)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN r.relation_id;
END
$$;
