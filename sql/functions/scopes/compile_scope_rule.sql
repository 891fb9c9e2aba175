-- synchro.compile_scope_rule: validates a scope rule for relation rel and returns it
-- normalized (referenced relations resolved to immutable relation_ids) together
-- with the columns of rel the rule reads. Relations a path, members or sql rule
-- reads are registered as capture dependencies under generation g. Rules are
-- evaluated later by materialization over projections, never over live rows.
--
--   {"kind":"shared","scope":"templates_public"}
--   {"kind":"column","template":"user:{owner_id}"}
--   {"kind":"path","path":["project_id", {"column":"org_id","references":"app.orgs"}],
--    "template":"org:{id}"}                       -- template over the last relation;
--                                                -- a step's column is a foreign key to the
--                                                -- next relation's key (or, with "references",
--                                                -- has no foreign key)
--   {"kind":"members","relation":"app.document_members","column":"document_id",
--    "template":"user:{user_id}"}                 -- column: a foreign key to rel's key
--                                                -- (optional when exactly one exists)
--   {"kind":"members","path":["project_id"],"relation":"app.project_members",
--    "column":"project_id","template":"user:{user_id}"}
--                                                -- the members of the row the path reaches
--                                                -- (steps as for path rules, through
--                                                -- synchro.compile_rule_path); column: a
--                                                -- foreign key to that relation's key
--   {"kind":"sql","membership":"SELECT ... $1 ...","impacts":{"app.acl":"SELECT ... $1 ..."}}
--                                                -- both may read, through synchro.projected,
--                                                -- only rel and the relations impacts declares
CREATE OR REPLACE FUNCTION synchro.compile_scope_rule(rel oid, rule jsonb, g bigint,
                                                     OUT normalized jsonb, OUT columns name[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    qname text := synchro.qualified_name(rel);
    kind text := rule->>'kind';
    walk record;
    parent oid;
    target oid;
    fk_count int;
    member_rel oid;
    member_col name;
    impacts jsonb := '{}';
    dep text;
    dep_sql text;
    declared oid[] := '{}';
    reads_own boolean;
BEGIN
    IF jsonb_typeof(rule) IS DISTINCT FROM 'object' OR jsonb_typeof(rule->'kind') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: scope_rule must be an object with a "kind" (shared, column, path, members, sql)', qname
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    CASE kind
    WHEN 'shared' THEN
        PERFORM synchro.check_keys(rule, ARRAY['kind', 'scope'], rel, 'scope_rule');
        IF jsonb_typeof(rule->'scope') IS DISTINCT FROM 'string' OR rule->>'scope' = '' THEN
            RAISE EXCEPTION 'synchro: relation % rejected: shared scope_rule needs a non-empty "scope"', qname
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Materialization indexes each row's scope beside its key; a scope every
        -- row is in that cannot be indexed would block capture at the first write.
        IF octet_length(rule->>'scope') > synchro.max_scope_bytes() THEN
            RAISE EXCEPTION 'synchro: relation % rejected: shared scope_rule "scope" is % bytes long, longer than synchro.max_scope_bytes() (% bytes)',
                qname, octet_length(rule->>'scope'), synchro.max_scope_bytes()
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        normalized := jsonb_build_object('kind', kind, 'scope', rule->>'scope');
        columns := '{}';
    WHEN 'column' THEN
        PERFORM synchro.check_keys(rule, ARRAY['kind', 'template'], rel, 'scope_rule');
        columns := synchro.template_columns(rule->>'template', rel, 'column scope_rule');
        normalized := jsonb_build_object('kind', kind, 'template', rule->>'template');
    WHEN 'path' THEN
        PERFORM synchro.check_keys(rule, ARRAY['kind', 'path', 'template'], rel, 'scope_rule');
        walk := synchro.compile_rule_path(rel, rule->'path', g, 'path', 'path scope_rule');
        columns := ARRAY[walk.first_column];
        PERFORM synchro.dependency_relation(walk.last, synchro.template_columns(rule->>'template', walk.last, 'path scope_rule'),
                                            g, 'relation ' || qname || ' path scope_rule');
        normalized := jsonb_build_object('kind', kind, 'path', walk.hops, 'template', rule->>'template');
    WHEN 'members' THEN
        PERFORM synchro.check_keys(rule, ARRAY['kind', 'path', 'relation', 'column', 'template'], rel, 'scope_rule');
        -- With a path, the membership rows are those of the row the path reaches.
        parent := rel;
        columns := '{}';
        IF rule ? 'path' THEN
            walk := synchro.compile_rule_path(rel, rule->'path', g, 'members scope_rule path', 'members scope_rule path');
            parent := walk.last;
            columns := ARRAY[walk.first_column];
        END IF;
        member_rel := synchro.resolve_relation_name(rule->>'relation', 'relation ' || qname || ' members scope_rule');
        IF rule ? 'column' THEN
            member_col := rule->>'column';
            PERFORM synchro.check_columns(member_rel, ARRAY[member_col], 'members scope_rule column');
        ELSE
            SELECT count(*), min(a.attname) INTO fk_count, member_col
            FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
            WHERE c.conrelid = member_rel AND c.confrelid = parent AND c.contype = 'f' AND cardinality(c.conkey) = 1;
            IF fk_count <> 1 THEN
                RAISE EXCEPTION 'synchro: relation % rejected: members relation % has % single-column foreign keys to %; name the referencing "column"',
                    qname, synchro.qualified_name(member_rel), fk_count,
                    CASE WHEN parent = rel THEN 'it' ELSE synchro.qualified_name(parent) || ' (the relation the path reaches)' END
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
        PERFORM synchro.check_reference(member_rel, member_col, parent, true, rel, 'members scope_rule');
        PERFORM synchro.template_columns(rule->>'template', member_rel, 'members scope_rule');
        normalized := jsonb_build_object('kind', kind, 'column', member_col, 'template', rule->>'template',
                                         'relation_id', synchro.dependency_relation(member_rel,
                                             member_col || synchro.template_columns(rule->>'template', member_rel, 'members scope_rule'),
                                             g, 'relation ' || qname || ' members scope_rule'),
                                         'relation', synchro.qualified_name(member_rel));
        IF rule ? 'path' THEN
            normalized := normalized || jsonb_build_object('path', walk.hops);
        END IF;
    WHEN 'sql' THEN
        PERFORM synchro.check_keys(rule, ARRAY['kind', 'membership', 'impacts'], rel, 'scope_rule');
        IF jsonb_typeof(rule->'membership') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'synchro: relation % rejected: sql scope_rule needs a "membership" query', qname
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF rule ? 'impacts' THEN
            PERFORM synchro.check_keys(rule->'impacts', ARRAY(SELECT jsonb_object_keys(rule->'impacts')), rel, 'sql scope_rule impacts');
            -- Membership is re-evaluated only when a declared relation changes, so
            -- the queries may read projections of rel and the declared relations only.
            FOR dep IN SELECT jsonb_object_keys(rule->'impacts') LOOP
                declared := declared || synchro.resolve_relation_name(dep, 'relation ' || qname || ' sql scope_rule impacts');
            END LOOP;
        END IF;
        reads_own := synchro.check_rule_query(rule->>'membership', rel, 'sql scope_rule membership', declared);
        IF rule ? 'impacts' THEN
            FOR dep, dep_sql IN SELECT key, value #>> '{}' FROM jsonb_each(rule->'impacts') LOOP
                target := synchro.resolve_relation_name(dep, 'relation ' || qname || ' sql scope_rule impacts');
                PERFORM synchro.check_rule_query(dep_sql, rel, 'sql scope_rule impact query for ' || dep, declared);
                impacts := impacts || jsonb_build_object(
                    synchro.dependency_relation(target, '{}', g, 'relation ' || qname || ' sql scope_rule')::text,
                    jsonb_build_object('relation', synchro.qualified_name(target), 'query', dep_sql));
            END LOOP;
        END IF;
        -- A membership that reads rel's own projection depends on rel's other
        -- rows: each transaction changing rel is materialized on its own
        -- (synchro.segmenting_relation), against its own state.
        normalized := jsonb_build_object('kind', kind, 'membership', rule->>'membership', 'impacts', impacts)
                      || CASE WHEN reads_own THEN '{"reads_own_projection": true}'::jsonb ELSE '{}' END;
        columns := synchro.relation_columns(rel);
    ELSE
        RAISE EXCEPTION 'synchro: relation % rejected: unknown scope_rule kind "%" (shared, column, path, members, sql)', qname, kind
            USING ERRCODE = 'invalid_parameter_value';
    END CASE;
END
$$;
