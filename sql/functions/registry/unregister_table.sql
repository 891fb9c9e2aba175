-- synchro.unregister_table: removes synced table relation from sync as a new
-- registry generation, in the caller's transaction, and returns the id of the
-- change (synchro.record_registry_change, which needs nothing staged): its
-- triggers and publication membership go now (later writes, a TRUNCATE too,
-- are neither fenced nor decoded); the capture worker activates the change in
-- source order, at this transaction (synchro.activate_bootstrap): its rows
-- leave every scope (each scope that held some is rebuilt by its clients: a
-- scope floor), its projections, row heads and fences go, and its
-- registration with them, so the table leaves the schema manifest. Refused: a
-- relation that is not a synced table (42704), one another table's rule reads
-- (55006: reconfigure or unregister that table first), one waiting for its
-- bootstrap, or while another registry change, reset or bootstrap is in
-- progress (55006).
CREATE OR REPLACE FUNCTION synchro.unregister_table(relation regclass)
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t synchro.synced_table;
BEGIN
    SELECT x.* INTO t FROM synchro.synced_table x JOIN synchro.relation r USING (relation_id) WHERE r.relation_oid = relation::oid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: relation % is not a registered synced table', synchro.qualified_name(relation::oid)
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN synchro.unregister_relation(t.relation_id, 'unregister_table');
END
$$;
