-- synchro.refuse: aborts a sync request with a protocol error (docs/protocol.md,
-- "Errors"): SQLSTATE SY<status> (e.g. SY409), the client-safe message, and the
-- protocol error code as HINT. The HTTP layer answers exactly that; the request's
-- transaction rolls back, so a refused request changes nothing.
-- A refusal answers a client, whose requests could otherwise flood the server
-- log with ERROR lines: it raises with log_min_messages at fatal for the rest
-- of the (aborting) transaction, so the server does not log it. Setting it
-- needs a superuser or, from PostgreSQL 15, GRANT SET ON PARAMETER
-- log_min_messages to the role that owns the bundle (migration warns without
-- it, and refusals are then logged as before). An exception block that catches
-- the refusal rolls the setting back with it.
CREATE OR REPLACE FUNCTION synchro.refuse(status integer, code text, message text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    BEGIN
        PERFORM set_config('log_min_messages', 'fatal', true);
    EXCEPTION WHEN insufficient_privilege THEN
        NULL;
    END;
    RAISE EXCEPTION USING ERRCODE = 'SY' || status::text, MESSAGE = message, HINT = code;
END
$$;
