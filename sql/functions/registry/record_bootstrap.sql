-- synchro.record_bootstrap: records a bootstrap of every bootstrap_pending
-- relation (synchro.record_registry_change, op register) and returns its id;
-- NULL when no relation is pending. A registration records its relations'
-- first bootstrap (synchro.begin_bootstrap); the coordinator records a new one
-- after an operator aborted one, so that pending relations are always
-- served in the end.
CREATE OR REPLACE FUNCTION synchro.record_bootstrap()
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rels bigint[] := ARRAY(SELECT r.relation_id FROM synchro.relation r WHERE r.bootstrap_pending ORDER BY r.relation_id);
BEGIN
    IF rels = '{}' THEN
        RETURN NULL;
    END IF;
    RETURN synchro.record_registry_change(rels, '{"op": "register"}');
END
$$;
