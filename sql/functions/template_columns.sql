-- synchro.template_columns: the columns a scope template such as "user:{owner_id}"
-- reads, validated against the relation it is evaluated over. A template needs at
-- least one placeholder and no stray braces.
CREATE OR REPLACE FUNCTION synchro.template_columns(template text, rel oid, context text)
RETURNS name[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cols name[];
BEGIN
    IF template IS NULL OR template = '' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % needs a non-empty "template"', synchro.qualified_name(rel), context
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT array_agg(DISTINCT m[1]::name) INTO cols
    FROM regexp_matches(template, '\{([^{}]+)\}', 'g') AS m;
    IF cols IS NULL OR regexp_replace(template, '\{[^{}]+\}', '', 'g') ~ '[{}]' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % template "%" must contain {column} placeholders and no other braces',
            synchro.qualified_name(rel), context, template
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN synchro.check_columns(rel, cols, context || ' template');
END
$$;
