-- synchro.sync_schema: GET /sync/schema: the canonical manifest with its version
-- and hash (synchro.current_schema).
CREATE OR REPLACE FUNCTION synchro.sync_schema()
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s synchro.schema_version := synchro.current_schema();
BEGIN
    RETURN jsonb_build_object('version', s.version, 'hash', s.hash) || s.manifest;
END
$$;
