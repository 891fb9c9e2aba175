-- synchro.projection_lookup: keys and images of the projected rows of relation rid
-- whose column col holds one of vals. Planned with literal values so the partial
-- expression index that registration creates for (rid, col) is used; of the
-- generation synchro.projection_generation names.
CREATE OR REPLACE FUNCTION synchro.projection_lookup(rid bigint, col text, vals text[])
RETURNS TABLE (key text, image jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF vals IS NULL OR cardinality(vals) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT p.key, p.image FROM synchro.projection p WHERE p.relation_id = %s AND (p.image ->> %L) = ANY ($1) AND p.stream_generation = $2',
        rid, col) USING vals, synchro.projection_generation();
END
$$;
