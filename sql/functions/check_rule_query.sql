-- synchro.check_rule_query: checks that a custom scope-rule query parses and plans
-- as a query taking one jsonb parameter ($1, a projected row image). It runs the
-- query with LIMIT 0, so it reads nothing and, being a subquery, cannot write.
CREATE OR REPLACE FUNCTION synchro.check_rule_query(query text, rel oid, context text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    IF query IS NULL OR btrim(query) = '' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % is empty', synchro.qualified_name(rel), context
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    BEGIN
        EXECUTE format('SELECT 1 FROM (%s) AS rule_query LIMIT 0', query) USING '{}'::jsonb;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % is not a valid query over one jsonb parameter: %',
            synchro.qualified_name(rel), context, SQLERRM
            USING ERRCODE = 'invalid_parameter_value';
    END;
END
$$;
