-- synchro.template_columns: the columns a scope template such as "user:{owner_id}"
-- reads, validated against the relation it is evaluated over. A template needs at
-- least one placeholder and no stray braces, and each placeholder must be a
-- column's whole name: rendering looks a placeholder up in the row image as
-- written, so one that names a column only once truncated to a name's 63 bytes
-- would put every row in no scope. Its text outside the placeholders, which
-- every scope it renders holds, must fit synchro.max_scope_bytes.
CREATE OR REPLACE FUNCTION synchro.template_columns(template text, rel oid, context text)
RETURNS name[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cols name[];
    too_long text;
    literal text;
BEGIN
    IF template IS NULL OR template = '' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % needs a non-empty "template"', synchro.qualified_name(rel), context
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT array_agg(DISTINCT m[1]::name) INTO cols
    FROM regexp_matches(template, '\{([^{}]+)\}', 'g') AS m;
    literal := regexp_replace(template, '\{[^{}]+\}', '', 'g');
    IF cols IS NULL OR literal ~ '[{}]' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % template "%" must contain {column} placeholders and no other braces',
            synchro.qualified_name(rel), context, template
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(literal) > synchro.max_scope_bytes() THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % template renders scopes longer than synchro.max_scope_bytes() (% bytes)',
            synchro.qualified_name(rel), context, synchro.max_scope_bytes()
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT m[1] INTO too_long
    FROM regexp_matches(template, '\{([^{}]+)\}', 'g') AS m
    WHERE m[1]::name::text <> m[1]
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % template names unknown column "%" (longer than a column name can be)',
            synchro.qualified_name(rel), context, too_long
            USING ERRCODE = 'undefined_column';
    END IF;
    RETURN synchro.check_columns(rel, cols, context || ' template');
END
$$;
