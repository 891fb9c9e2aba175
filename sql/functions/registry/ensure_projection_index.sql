-- synchro.ensure_projection_index: the partial expression index on the projection
-- that rule evaluation uses to find rows of relation rid by column col.
CREATE OR REPLACE FUNCTION synchro.ensure_projection_index(rid bigint, col text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON synchro.projection ((image ->> %L)) WHERE relation_id = %s',
                   'projection_r' || rid || '_' || left(md5(col), 12), col, rid);
END
$$;
