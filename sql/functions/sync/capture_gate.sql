-- synchro.capture_gate: refuses a pull or rebuild with 503 capture_pending while
-- any accepted push fence of the client is not WAL-materialized (docs/change-stream.md, "Write
-- fences", capture gate); nothing is served or advanced then. (Readiness, the
-- other 503, is checked by the HTTP layer from synchro.is_ready before the call.)
CREATE OR REPLACE FUNCTION synchro.capture_gate(client_id text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT FROM synchro.fence_pending p WHERE p.client_id = capture_gate.client_id) THEN
        PERFORM synchro.refuse(503, 'capture_pending', 'accepted changes of this client are not yet captured; retry later');
    END IF;
END
$$;
