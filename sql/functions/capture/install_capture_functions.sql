-- synchro.install_capture_functions: creates, or replaces, the generated
-- capture functions of registered relation rid in schema synchro_capture: its
-- fence synchro_capture.fence_<rid> (synchro.fence_source; a security definer:
-- writers of registered tables need no rights on the synchro schema, and
-- pg_logical_emit_message is reserved to privileged roles) and its key guard
-- synchro_capture.key_guard_<rid> (synchro.key_guard_source), from the
-- registry as it is now, executable by nobody but their owner (triggers run
-- them regardless). A definer itself, so that whoever registers, they belong
-- to the role that owns the function bundle, as the generic triggers before
-- them did. Registration and reconfiguration (synchro.install_capture) and
-- every function bundle install call it; a session that had compiled a
-- replaced function compiles it again at its next call.
CREATE OR REPLACE FUNCTION synchro.install_capture_functions(rid bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fence text := format('synchro_capture.%I()', 'fence_' || rid);
    guard text := format('synchro_capture.%I()', 'key_guard_' || rid);
BEGIN
    EXECUTE format('CREATE OR REPLACE FUNCTION %s RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER '
                   'SET search_path = pg_catalog, pg_temp AS %L', fence, synchro.fence_source(rid));
    EXECUTE format('CREATE OR REPLACE FUNCTION %s RETURNS trigger LANGUAGE plpgsql '
                   'SET search_path = pg_catalog, pg_temp AS %L', guard, synchro.key_guard_source(rid));
    EXECUTE format('REVOKE ALL ON FUNCTION %s, %s FROM PUBLIC', fence, guard);
END
$$;
