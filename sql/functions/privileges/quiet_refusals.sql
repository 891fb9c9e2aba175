-- Whether client refusals stay out of the server log: synchro.refuse sets
-- log_min_messages for the transaction it aborts, which needs a superuser or
-- the SET privilege on the parameter (PostgreSQL 15). Without it migration
-- warns: every refused request would be an ERROR line in the server log, which
-- a client could flood.
DO $$
BEGIN
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
       AND NOT pg_catalog.has_parameter_privilege(current_user, 'log_min_messages', 'SET') THEN
        RAISE WARNING 'synchro: % may not set log_min_messages, so every refused sync request is logged by the server as an ERROR; as a superuser, GRANT SET ON PARAMETER log_min_messages TO %', current_user, current_user;
    END IF;
END
$$;
