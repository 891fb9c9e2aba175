-- synchro.is_ready: true only when synchro.readiness has rows and every one of
-- them is ok; false otherwise (fail-closed, never NULL).
CREATE OR REPLACE FUNCTION synchro.is_ready()
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*) > 0 AND count(*) = count(*) FILTER (WHERE r.ok IS TRUE) FROM synchro.readiness r
$$;
