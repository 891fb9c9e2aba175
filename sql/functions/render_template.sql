-- synchro.render_template: a scope template such as "user:{owner_id}" rendered over
-- a projected row image; NULL when any placeholder's value is NULL or missing, so
-- that such a row belongs to no scope through this template. Templates are
-- validated at registration ({column} placeholders, no stray braces).
CREATE OR REPLACE FUNCTION synchro.render_template(template text, image jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog
AS $$
DECLARE
    rest text := template;
    result text := '';
    open_at integer;
    close_at integer;
    val text;
BEGIN
    LOOP
        open_at := strpos(rest, '{');
        IF open_at = 0 THEN
            RETURN result || rest;
        END IF;
        close_at := strpos(rest, '}');
        val := image ->> substr(rest, open_at + 1, close_at - open_at - 1);
        IF val IS NULL THEN
            RETURN NULL;
        END IF;
        result := result || left(rest, open_at - 1) || val;
        rest := substr(rest, close_at + 1);
    END LOOP;
END
$$;
