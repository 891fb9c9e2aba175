-- synchro.relation_columns: the live (not dropped) columns of a relation in
-- column order.
CREATE OR REPLACE FUNCTION synchro.relation_columns(rel oid)
RETURNS name[]
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog
AS $$
    SELECT coalesce(array_agg(attname ORDER BY attnum), '{}')
    FROM pg_attribute
    WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped
$$;
