-- synchro.activate_registry_generation: emits the transactional logical message
-- (prefix "synchro.registry") that marks where generation g activates in source
-- order. Row events decoded before it use the prior generation, later ones use g
-- (ADR 001, "Registry activation and relation drift").
CREATE OR REPLACE FUNCTION synchro.activate_registry_generation(g bigint)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog
AS $$
    SELECT NULL::void
    FROM pg_logical_emit_message(true, 'synchro.registry', json_build_object('generation', g)::text)
$$;
