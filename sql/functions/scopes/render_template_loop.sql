-- synchro.render_template_loop: synchro.render_template for any template (no
-- placeholder, or several): each {column} is replaced by the image's value of that
-- column, left to right; NULL as soon as one value is NULL or missing.
CREATE OR REPLACE FUNCTION synchro.render_template_loop(template text, image jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
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
