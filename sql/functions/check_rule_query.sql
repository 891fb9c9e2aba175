-- synchro.check_rule_query: checks that a custom scope-rule query parses and plans
-- as a query taking one jsonb parameter ($1, a projected row image), and that it
-- reads no table outside Synchro's own schema (and the system catalogs):
-- materialization evaluates rules over projections as of each transaction
-- (synchro.projected), never over live rows, which may already hold later
-- changes (ADR 001, "Membership evaluation"). It runs the query with LIMIT 0, so
-- it reads nothing and, being a subquery, cannot write; the tables it would scan
-- come from its generic plan (a plan for one parameter value may fold a scan
-- away). A table read inside a function the query calls is not seen.
CREATE OR REPLACE FUNCTION synchro.check_rule_query(query text, rel oid, context text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mode text := current_setting('plan_cache_mode');
    plan jsonb;
    live text;
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

    IF EXISTS (SELECT FROM pg_prepared_statements WHERE name = 'synchro_rule_probe') THEN
        DEALLOCATE synchro_rule_probe; -- left by a call that failed in between
    END IF;
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
    EXECUTE format('PREPARE synchro_rule_probe(jsonb) AS SELECT 1 FROM (%s) AS rule_query', query);
    EXECUTE 'EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE synchro_rule_probe(NULL)' INTO plan;
    DEALLOCATE synchro_rule_probe;
    PERFORM set_config('plan_cache_mode', mode, true);
    SELECT string_agg(DISTINCT format('%I.%I', n->>'Schema', n->>'Relation Name'), ', ')
    INTO live
    FROM jsonb_path_query(plan, 'strict $.**') n
    WHERE jsonb_typeof(n) = 'object' AND n ? 'Relation Name'
      AND n->>'Schema' NOT IN ('synchro', 'pg_catalog', 'information_schema');
    IF live IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % reads % directly; a rule reads registered rows through synchro.projected(relation), never live rows',
            synchro.qualified_name(rel), context, live
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
