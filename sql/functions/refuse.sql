-- synchro.refuse: aborts a sync request with a protocol error (docs/protocol-v3.md,
-- "Errors"): SQLSTATE SY<status> (e.g. SY409), the client-safe message, and the
-- protocol error code as HINT. The HTTP layer answers exactly that; the request's
-- transaction rolls back, so a refused request changes nothing.
CREATE OR REPLACE FUNCTION synchro.refuse(status integer, code text, message text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'SY' || status::text, MESSAGE = message, HINT = code;
END
$$;
