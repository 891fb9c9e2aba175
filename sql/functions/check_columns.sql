-- synchro.check_columns: raises, naming the relation and the option, when any of
-- the given column names is not a column of the relation. Returns the names.
CREATE OR REPLACE FUNCTION synchro.check_columns(rel oid, cols name[], context text)
RETURNS name[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog
AS $$
DECLARE
    unknown name;
BEGIN
    SELECT u INTO unknown
    FROM unnest(cols) u
    WHERE u IS NULL OR u <> ALL (synchro.relation_columns(rel))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % names unknown column "%"',
            synchro.qualified_name(rel), context, unknown
            USING ERRCODE = 'undefined_column';
    END IF;
    RETURN cols;
END
$$;
