-- synchro.activate_registry_generation: emits the transactional logical message
-- (prefix "synchro.registry") that marks where generation g activates in source
-- order. Row events decoded before it use the prior generation, later ones use g
-- (docs/change-stream.md, "Registry activation and relation drift"). It also records the
-- schema manifest version the new registry gives clients.
CREATE OR REPLACE FUNCTION synchro.activate_registry_generation(g bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_logical_emit_message(true, 'synchro.registry', json_build_object('generation', g)::text);
    PERFORM synchro.current_schema();
END
$$;
