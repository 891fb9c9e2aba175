-- synchro.invalid_column: a client-safe message naming the first column of row
-- (a push mutation's columns as JSON) whose value its column type rejects; it
-- never quotes the value.
CREATE OR REPLACE FUNCTION synchro.invalid_column(r synchro.relation, row_values jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col text;
BEGIN
    FOR col IN SELECT k FROM jsonb_object_keys(row_values) k ORDER BY k LOOP
        BEGIN
            EXECUTE format('SELECT (jsonb_populate_record(NULL::%I.%I, $1)).%I', r.schema_name, r.relation_name, col)
                USING jsonb_build_object(col, row_values -> col);
        EXCEPTION WHEN data_exception THEN
            RETURN format('column "%s" has a value its type does not accept', col);
        END;
    END LOOP;
    RETURN 'a value does not fit its column';
END
$$;
