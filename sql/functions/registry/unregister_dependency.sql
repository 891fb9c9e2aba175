-- synchro.unregister_dependency: removes capture dependency relation from
-- capture (synchro.unregister_relation: its triggers and publication
-- membership now; its projections, row heads, fences and registration when the
-- capture worker activates the change) and returns the change's id. Refused: a
-- relation that is not a registered dependency (42704), one a scope rule still
-- reads (55006: reconfigure or unregister the tables whose rules read it
-- first), or while another registry change, reset or bootstrap is in progress.
CREATE OR REPLACE FUNCTION synchro.unregister_dependency(relation regclass)
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid bigint;
BEGIN
    SELECT r.relation_id INTO rid FROM synchro.relation r
    WHERE r.relation_oid = relation::oid AND r.registration_kind = 'capture_dependency';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: relation % is not a registered capture dependency', synchro.qualified_name(relation::oid)
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN synchro.unregister_relation(rid, 'unregister_dependency');
END
$$;
