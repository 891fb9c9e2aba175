-- synchro.relation_columns: the columns of a relation that capture can carry, in
-- column order: live (not dropped) and not generated (PostgreSQL's logical
-- decoding leaves stored generated columns out of every row it decodes).
CREATE OR REPLACE FUNCTION synchro.relation_columns(rel oid)
RETURNS name[]
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(attname ORDER BY attnum), '{}')
    FROM pg_attribute
    WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
$$;
