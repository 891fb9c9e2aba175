-- Who may emit logical messages. Capture reads every transactional message with
-- the prefixes synchro.fence and synchro.registry as a write fence or a registry
-- activation, and a fence or activation it cannot match is a blocking failure
-- (docs/change-stream.md): PostgreSQL lets every role emit any message, so any role that can
-- connect could forge one and block capture for good. Only the fence and
-- registry activation (definer functions of the role running migrations) need
-- it, so it is revoked from PUBLIC in this database, whatever the function's
-- signature on this server version, when the migrating role may (a superuser);
-- otherwise migration warns, and a superuser should revoke it.
DO $$
DECLARE
    fn regprocedure;
BEGIN
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
        FOR fn IN SELECT p.oid FROM pg_catalog.pg_proc p
                  WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace LOOP
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', fn);
        END LOOP;
    ELSIF EXISTS (SELECT FROM pg_catalog.pg_proc p
                  WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
                    AND pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')) THEN
        RAISE WARNING 'synchro: every role may call pg_logical_emit_message, so any role could forge a capture message and block capture; as a superuser, REVOKE EXECUTE ON FUNCTION pg_logical_emit_message FROM PUBLIC and GRANT it to %', current_user;
    END IF;
END
$$;
