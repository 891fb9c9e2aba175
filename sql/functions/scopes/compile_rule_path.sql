-- synchro.compile_rule_path: validates the "path" of a path rule, or of a
-- members rule that reaches its membership relation through one, followed from
-- relation rel, and returns it normalized: one {"column", "relation_id",
-- "relation"} per step, the relation the last step reaches, and the column of
-- rel the first step follows (which rel's registration must capture). Each
-- step's column is a single-column foreign key to the next relation's primary
-- key, or, given as {"column": ..., "references": "schema.table"}, a column
-- without a foreign key (the step declares the reference) or with one to that
-- relation's key; a path may not return to rel. Every relation a step reaches
-- is registered as a capture dependency (all columns) under generation g, and
-- each intermediate relation's projection must hold the column followed from
-- it. Raises 22023 (42703 for an unknown column) naming rel; label starts the
-- messages about a step ("path", "members scope_rule path"), context names the
-- rule elsewhere ("path scope_rule", "members scope_rule path").
CREATE OR REPLACE FUNCTION synchro.compile_rule_path(rel oid, path jsonb, g bigint, label text, context text,
                                                    OUT hops jsonb, OUT last oid, OUT first_column name)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    qname text := synchro.qualified_name(rel);
    cur oid := rel;
    hop jsonb;
    hop_col name;
    target oid;
    fk_count int;
BEGIN
    IF jsonb_typeof(path) IS DISTINCT FROM 'array' OR jsonb_array_length(path) = 0 THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % needs a non-empty "path" array', qname, context
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    hops := '[]';
    FOR hop IN SELECT * FROM jsonb_array_elements(path) LOOP
        IF jsonb_typeof(hop) = 'string' THEN
            hop_col := hop #>> '{}';
            PERFORM synchro.check_columns(cur, ARRAY[hop_col], context);
            SELECT count(*), min(c.confrelid) INTO fk_count, target
            FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
            WHERE c.conrelid = cur AND c.contype = 'f' AND cardinality(c.conkey) = 1 AND a.attname = hop_col;
            IF fk_count <> 1 THEN
                RAISE EXCEPTION 'synchro: relation % rejected: % column "%" of % has % single-column foreign keys; name the target with {"column": ..., "references": "schema.table"}',
                    qname, label, hop_col, synchro.qualified_name(cur), fk_count
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            PERFORM synchro.check_reference(cur, hop_col, target, true, rel, context);
        ELSIF jsonb_typeof(hop) = 'object' THEN
            PERFORM synchro.check_keys(hop, ARRAY['column', 'references'], rel, context || ' step');
            hop_col := hop->>'column';
            PERFORM synchro.check_columns(cur, ARRAY[hop_col], context);
            target := synchro.resolve_relation_name(hop->>'references', 'relation ' || qname || ' ' || context);
            -- Without a foreign key the step declares the reference; with one, it must be this one.
            PERFORM synchro.check_reference(cur, hop_col, target, false, rel, context);
        ELSE
            RAISE EXCEPTION 'synchro: relation % rejected: each % step is a column name or {"column": ..., "references": ...}', qname, label
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF target = rel THEN
            RAISE EXCEPTION 'synchro: relation % rejected: % may not return to the table itself', qname, context
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF cur = rel THEN
            first_column := hop_col;
        ELSE
            -- cur is registered by now; its projection must hold the column followed.
            PERFORM synchro.dependency_relation(cur, ARRAY[hop_col], g, 'relation ' || qname || ' ' || context);
        END IF;
        -- The target is captured whole, so later steps and the rule can read it.
        hops := hops || jsonb_build_object('column', hop_col,
                                           'relation_id', synchro.dependency_relation(target, '{}', g, 'relation ' || qname || ' ' || context),
                                           'relation', synchro.qualified_name(target));
        cur := target;
    END LOOP;
    last := cur;
END
$$;
