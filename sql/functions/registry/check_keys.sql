-- synchro.check_keys: raises when a JSON object has a key outside the allowed set,
-- naming the relation, the argument and the unknown key.
CREATE OR REPLACE FUNCTION synchro.check_keys(obj jsonb, allowed text[], rel oid, context text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unknown text;
BEGIN
    IF jsonb_typeof(obj) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % must be a JSON object', synchro.qualified_name(rel), context
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT k INTO unknown FROM jsonb_object_keys(obj) k WHERE k <> ALL (allowed) ORDER BY k LIMIT 1;
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: relation % rejected: unknown key "%" in %; allowed: %',
            synchro.qualified_name(rel), unknown, context, array_to_string(allowed, ', ')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
