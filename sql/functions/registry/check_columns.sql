-- synchro.check_columns: raises, naming the relation and the option, when any of
-- the given column names is not a column of the relation that capture can carry
-- (synchro.relation_columns): unknown (42703) or generated (0A000). Returns the
-- names.
CREATE OR REPLACE FUNCTION synchro.check_columns(rel oid, cols name[], context text)
RETURNS name[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unknown name;
BEGIN
    SELECT u INTO unknown
    FROM unnest(cols) u
    WHERE u IS NULL OR u <> ALL (synchro.relation_columns(rel))
    LIMIT 1;
    IF FOUND AND EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = rel AND a.attname = unknown
                                                      AND a.attnum > 0 AND NOT a.attisdropped) THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % names generated column "%", which logical decoding does not carry',
            synchro.qualified_name(rel), context, unknown
            USING ERRCODE = 'feature_not_supported';
    ELSIF FOUND THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % names unknown column "%"',
            synchro.qualified_name(rel), context, unknown
            USING ERRCODE = 'undefined_column';
    END IF;
    RETURN cols;
END
$$;
