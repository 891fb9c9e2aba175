-- synchro.fill_template: template with every token @NAME@ (capital letters and
-- underscores between two @) replaced by vals ->> 'NAME', in one pass, so
-- that no replacement is read again as a token; any other @ stays as it is. A
-- token vals lacks fails (22023): the generated code would not compile. Used
-- to generate code (synchro.fence_source, synchro.key_guard_source), whose
-- values the caller quotes.
CREATE OR REPLACE FUNCTION synchro.fill_template(template text, vals jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    filled text;
    missing text;
BEGIN
    SELECT string_agg(CASE WHEN m[1] IS NULL THEN m[2] ELSE vals ->> substr(m[1], 2, length(m[1]) - 2) END, '' ORDER BY i),
           min(m[1]) FILTER (WHERE m[1] IS NOT NULL AND NOT vals ? substr(m[1], 2, length(m[1]) - 2))
    INTO filled, missing
    FROM regexp_matches(template, '(@[A-Z_]+@)|([^@]+|@)', 'g') WITH ORDINALITY x(m, i);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: template token % has no value', missing USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN coalesce(filled, '');
END
$$;
