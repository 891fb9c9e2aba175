-- synchro.render_template: a scope template such as "user:{owner_id}" rendered over
-- a projected row image; NULL when any placeholder's value is NULL or missing, so
-- that such a row belongs to no scope through this template.
CREATE OR REPLACE FUNCTION synchro.render_template(template text, image jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog
AS $$
DECLARE
    literals text[] := regexp_split_to_array(template, '\{[^{}]+\}');
    names text[] := ARRAY(SELECT m[1] FROM regexp_matches(template, '\{([^{}]+)\}', 'g') m);
    result text := literals[1];
    val text;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(names), 0) LOOP
        val := image ->> names[i];
        IF val IS NULL THEN
            RETURN NULL;
        END IF;
        result := result || val || literals[i + 1];
    END LOOP;
    RETURN result;
END
$$;
