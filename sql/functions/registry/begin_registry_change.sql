-- synchro.begin_registry_change: serializes registry changes and creates the next
-- durable, validated registry generation. The caller finishes the change with
-- synchro.activate_registry_generation in the same transaction. Refused
-- (55006) while a relation waits for its bootstrap or a registry change is
-- not activated yet: a new generation could read rows the active projections
-- do not hold yet, and changes are activated one at a time, in order.
CREATE OR REPLACE FUNCTION synchro.begin_registry_change(change_reason text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('synchro.registry'));
    IF EXISTS (SELECT FROM synchro.relation r WHERE r.bootstrap_pending)
       OR EXISTS (SELECT FROM synchro.stream_reset x WHERE x.kind = 'bootstrap' AND x.phase IN ('staging', 'catching_up', 'ready')) THEN
        RAISE EXCEPTION 'synchro: % is waiting for its projection bootstrap; change the registry after it is activated (synchroctl reset status)',
            coalesce((SELECT string_agg(r.schema_name || '.' || r.relation_name, ', ' ORDER BY r.relation_id) FROM synchro.relation r WHERE r.bootstrap_pending),
                     'a registry change')
            USING ERRCODE = 'object_in_use';
    END IF;
    INSERT INTO synchro.registry_generation (generation, reason)
    SELECT max(generation) + 1, change_reason FROM synchro.registry_generation
    RETURNING generation INTO g;
    RETURN g;
END
$$;
