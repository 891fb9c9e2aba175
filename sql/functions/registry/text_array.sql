-- synchro.text_array: a JSON array of strings as name[], or an error naming the
-- relation and the option when it is anything else.
CREATE OR REPLACE FUNCTION synchro.text_array(val jsonb, rel oid, context text)
RETURNS name[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF jsonb_typeof(val) IS DISTINCT FROM 'array'
       OR EXISTS (SELECT FROM jsonb_array_elements(val) e WHERE jsonb_typeof(e) <> 'string') THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % must be an array of column names', synchro.qualified_name(rel), context
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN ARRAY(SELECT e::name FROM jsonb_array_elements_text(val) e);
END
$$;
