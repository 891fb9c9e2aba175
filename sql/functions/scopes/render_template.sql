-- synchro.render_template: a scope template such as "user:{owner_id}" rendered over
-- a projected row image; NULL when any placeholder's value is NULL or missing, so
-- that such a row belongs to no scope through this template. Templates are
-- validated at registration ({column} placeholders, no stray braces).
-- A template with one placeholder (the usual "prefix:{column}") is rendered by
-- one expression; others by synchro.render_template_loop. A plain SQL function
-- without a SET clause and with schema-qualified names, so that the planner
-- inlines it: materialization renders a template for every changed row, and a
-- PL/pgSQL call per row cost more than the rendering.
CREATE OR REPLACE FUNCTION synchro.render_template(template text, image jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN pg_catalog.strpos(template, '{') OPERATOR(pg_catalog.>) 0
             AND pg_catalog.strpos(pg_catalog.split_part(template, '}', 2), '{') OPERATOR(pg_catalog.=) 0
        THEN pg_catalog.split_part(template, '{', 1)
             OPERATOR(pg_catalog.||) (image OPERATOR(pg_catalog.->>)
                                      pg_catalog.split_part(pg_catalog.split_part(template, '{', 2), '}', 1))
             OPERATOR(pg_catalog.||) pg_catalog.split_part(template, '}', 2)
        ELSE synchro.render_template_loop(template, image)
    END
$$;
