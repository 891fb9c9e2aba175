-- synchro.begin_registry_change: serializes registry changes and creates the next
-- durable, validated registry generation. The caller finishes the change with
-- synchro.activate_registry_generation in the same transaction.
CREATE OR REPLACE FUNCTION synchro.begin_registry_change(change_reason text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('synchro.registry'));
    INSERT INTO synchro.registry_generation (generation, reason)
    SELECT max(generation) + 1, change_reason FROM synchro.registry_generation
    RETURNING generation INTO g;
    RETURN g;
END
$$;
