-- synchro.capture_gate: refuses a pull or rebuild that capture cannot serve yet
-- (ADR 001, "Write fences", capture gate): 503 not_ready when readiness fails
-- (a blocking poison, a stale worker, lag, a stale bundle), and 503
-- capture_pending while any accepted push fence of the client is not
-- WAL-materialized. Nothing is served or advanced in either case.
CREATE OR REPLACE FUNCTION synchro.capture_gate(client_id text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    IF NOT synchro.is_ready() THEN
        PERFORM synchro.refuse(503, 'not_ready', 'capture is not ready; retry later');
    END IF;
    IF EXISTS (SELECT FROM synchro.fence f WHERE f.client_id = capture_gate.client_id AND f.materialized_lsn IS NULL) THEN
        PERFORM synchro.refuse(503, 'capture_pending', 'accepted changes of this client are not yet captured; retry later');
    END IF;
END
$$;
