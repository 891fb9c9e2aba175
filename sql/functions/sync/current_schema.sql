-- synchro.current_schema: the schema manifest with its version and hash (first 16
-- hex digits of the md5 of the manifest's canonical jsonb text). A manifest whose
-- hash differs from the latest recorded one is recorded as the next version, so
-- the version moves forward exactly when the hash changes.
CREATE OR REPLACE FUNCTION synchro.current_schema()
RETURNS synchro.schema_version
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    manifest jsonb := synchro.schema_manifest();
    digest text := left(md5(manifest::text), 16);
    latest synchro.schema_version;
BEGIN
    SELECT * INTO latest FROM synchro.schema_version ORDER BY version DESC LIMIT 1;
    IF latest.hash IS DISTINCT FROM digest THEN
        PERFORM pg_advisory_xact_lock(hashtext('synchro.schema_version'));
        SELECT * INTO latest FROM synchro.schema_version ORDER BY version DESC LIMIT 1;
        IF latest.hash IS DISTINCT FROM digest THEN
            INSERT INTO synchro.schema_version (hash, manifest) VALUES (digest, manifest) RETURNING * INTO latest;
        END IF;
    END IF;
    RETURN latest;
END
$$;
