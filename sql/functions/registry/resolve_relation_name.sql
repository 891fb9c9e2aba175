-- synchro.resolve_relation_name: resolves a schema-qualified relation name given in
-- a scope rule ("schema.table", quoting allowed). A bare name is rejected: lookups
-- never use search_path (docs/change-stream.md, "Registry activation and relation drift").
CREATE OR REPLACE FUNCTION synchro.resolve_relation_name(qualified text, context text)
RETURNS oid
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts text[];
    result oid;
BEGIN
    BEGIN
        parts := parse_ident(qualified);
    EXCEPTION WHEN invalid_parameter_value THEN
        parts := NULL;
    END;
    IF parts IS NULL OR cardinality(parts) <> 2 THEN
        RAISE EXCEPTION 'synchro: %: relation name "%" must be schema-qualified (schema.table)', context, qualified
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.oid INTO result
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = parts[1] AND c.relname = parts[2];
    IF result IS NULL THEN
        RAISE EXCEPTION 'synchro: %: relation "%" does not exist', context, qualified
            USING ERRCODE = 'undefined_table';
    END IF;
    RETURN result;
END
$$;
