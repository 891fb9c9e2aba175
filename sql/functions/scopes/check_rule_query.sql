-- synchro.check_rule_query: refuses a custom scope-rule query unless it parses
-- and plans as one statement taking one jsonb parameter ($1, a projected row
-- image) and reads, besides the system catalogs, only projections of the
-- relations in readable (the rule's own relation and those its "impacts"
-- declare), through synchro.projected(relation) calls naming a constant
-- relation. It checks the generic plan of the query run with LIMIT 0 (reading
-- and writing nothing); Synchro's own tables and other synchro functions are
-- refused, and every other function the plan calls must be IMMUTABLE, or built
-- in and not VOLATILE. The query must parse on its own and may end in a --
-- comment (every statement embedding it ends its text on its own line).
-- Returns whether the query reads rel's own projection (synchro.rule_read).
-- Why: docs/decisions.md, "What an sql rule may read".
DROP FUNCTION IF EXISTS synchro.check_rule_query(text, oid, text);
DROP FUNCTION IF EXISTS synchro.check_rule_query(text, oid, text, oid[]);
CREATE OR REPLACE FUNCTION synchro.check_rule_query(query text, rel oid, context text, readable oid[])
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mode text := current_setting('plan_cache_mode');
    plan jsonb;
    live text;
    s text;
    pos int;
    rest text;
    arg text;
    target oid;
    call_prefix constant text := 'synchro.projected(';
    probe refcursor;
    one integer;
    reads_own boolean := false;
BEGIN
    IF query IS NULL OR btrim(query) = '' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % is empty', synchro.qualified_name(rel), context
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Opened as a cursor, which PostgreSQL refuses for text that is several
    -- statements before running any: the query is embedded in the statements
    -- below and in materialization's, and one that closes them and starts
    -- others would run those statements here and fail every evaluation later.
    -- Everywhere it is embedded its text ends on its own line, so a trailing
    -- -- comment ends with it instead of swallowing the embedding's end. It is
    -- then prepared on its own: text that closes the subquery it is embedded in
    -- and opens another (balanced only with the embedding's parenthesis) parses
    -- embedded here but reads differently in every evaluation (PREPARE parses,
    -- it does not plan).
    IF EXISTS (SELECT FROM pg_prepared_statements WHERE name = 'synchro_rule_probe') THEN
        DEALLOCATE synchro_rule_probe; -- left by a call that failed in between
    END IF;
    BEGIN
        OPEN probe FOR EXECUTE format(E'SELECT 1 FROM (%s\n) AS rule_query LIMIT 0', query) USING '{}'::jsonb;
        FETCH probe INTO one;
        CLOSE probe;
        EXECUTE format(E'PREPARE synchro_rule_probe(jsonb) AS %s\n', query);
        DEALLOCATE synchro_rule_probe;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % is not a valid query over one jsonb parameter: %',
            synchro.qualified_name(rel), context, SQLERRM
            USING ERRCODE = 'invalid_parameter_value';
    END;

    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
    -- The whole row is selected: the planner drops an output column nobody
    -- reads, and with it a call in that column this check must see. A query
    -- whose generic plan fails (a constant 1/0 in a CASE arm is evaluated when
    -- planned without its parameter's value) is refused: it would fail every
    -- evaluation whenever PostgreSQL chose a generic plan for it.
    BEGIN
        EXECUTE format(E'PREPARE synchro_rule_probe(jsonb) AS SELECT rule_query FROM (%s\n) AS rule_query', query);
        EXECUTE 'EXPLAIN (VERBOSE, FORMAT JSON) EXECUTE synchro_rule_probe(NULL)' INTO plan;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % fails when planned for any row: %',
            synchro.qualified_name(rel), context, SQLERRM
            USING ERRCODE = 'invalid_parameter_value';
    END;
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
    -- synchro.projected is not inlined (it has a SET clause), so it stays in the
    -- plan, and a direct scan of Synchro's tables (synchro.projection holds every
    -- relation's rows) would bypass the check below.
    SELECT string_agg(DISTINCT format('%I.%I', n->>'Schema', n->>'Relation Name'), ', ')
    INTO live
    FROM jsonb_path_query(plan, 'strict $.**') n
    WHERE jsonb_typeof(n) = 'object' AND n ? 'Relation Name' AND n->>'Schema' = 'synchro';
    IF live IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % reads % directly; a rule reads projections only through synchro.projected(relation)',
            synchro.qualified_name(rel), context, live
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Every call of a synchro function in the plan's expressions (function scans,
    -- select lists, filters, subplans, CTEs), deparsed schema-qualified since the
    -- search_path here leaves synchro out. A mention inside a string constant or
    -- an alias is taken for a call too: that can only refuse a rule, never let a
    -- call through, because each occurrence is checked where it starts.
    FOR s IN
        SELECT DISTINCT n #>> '{}'
        FROM jsonb_path_query(plan, 'strict $.**') n
        WHERE jsonb_typeof(n) = 'string' AND strpos(n #>> '{}', 'synchro.') > 0
    LOOP
        SELECT string_agg(DISTINCT m[1], ', ') INTO live
        FROM regexp_matches(s, 'synchro\.([A-Za-z0-9_$]+)\(', 'g') m
        WHERE m[1] <> 'projected';
        IF live IS NOT NULL THEN
            RAISE EXCEPTION 'synchro: relation % rejected: % calls synchro.%; a rule reads projections only through synchro.projected(relation)',
                synchro.qualified_name(rel), context, live
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        pos := strpos(s, call_prefix);
        WHILE pos > 0 LOOP
            rest := substr(s, pos + length(call_prefix));
            -- A constant argument deparses as 'name'::regclass (quotes doubled).
            arg := substring(rest FROM '^''((?:[^'']|'''')*)''::regclass\)');
            IF arg IS NULL THEN
                RAISE EXCEPTION 'synchro: relation % rejected: % calls synchro.projected with an argument that is not a constant relation; name the relation it reads, e.g. synchro.projected(''schema.table'')',
                    synchro.qualified_name(rel), context
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            target := to_regclass(replace(arg, '''''', ''''));
            IF target IS NULL THEN
                RAISE EXCEPTION 'synchro: relation % rejected: % calls synchro.projected on a relation that cannot be resolved',
                    synchro.qualified_name(rel), context
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            reads_own := reads_own OR target = rel;
            IF target <> rel AND target <> ALL (coalesce(readable, '{}')) THEN
                RAISE EXCEPTION 'synchro: relation % rejected: % reads the projection of %, which its "impacts" do not declare; a change to it would not re-evaluate memberships: add an impact query for it',
                    synchro.qualified_name(rel), context, synchro.qualified_name(target)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            pos := CASE WHEN strpos(rest, call_prefix) = 0 THEN 0
                        ELSE pos + length(call_prefix) + strpos(rest, call_prefix) - 1 END;
        END LOOP;
    END LOOP;

    -- Every other call in the plan's expressions: built-ins deparse unqualified
    -- (pg_catalog is the search_path here), others schema-qualified, each part
    -- quoted as quote_ident quotes it. As above, a mention in a string constant
    -- can only refuse a rule.
    SELECT string_agg(DISTINCT format('%I.%I', f.nspname, f.proname), ', ')
    INTO live
    FROM (SELECT DISTINCT n #>> '{}' AS s
          FROM jsonb_path_query(plan, 'strict $.**') n
          WHERE jsonb_typeof(n) = 'string') str,
         regexp_matches(str.s, '(?:([A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")+")\.)?([A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")+")\(', 'g') m,
         LATERAL (SELECT ns.nspname, p.proname, p.provolatile
                  FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace
                  WHERE quote_ident(ns.nspname) = coalesce(m[1], 'pg_catalog') AND quote_ident(p.proname) = m[2]) f
    WHERE f.nspname <> 'synchro'
      AND (f.provolatile = 'v' OR (f.nspname <> 'pg_catalog' AND f.provolatile <> 'i'));
    IF live IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % calls %, which is not IMMUTABLE (or is a VOLATILE built-in): capture cannot follow what it reads, and it may answer differently when a transaction is materialized again',
            synchro.qualified_name(rel), context, live
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A rule reads registered rows only through synchro.projected(relation); declare a function that reads no table IMMUTABLE, or write its SQL into the rule.';
    END IF;
    RETURN reads_own;
END
$$;
