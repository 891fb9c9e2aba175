-- synchro.scopes_by_lookup: the scopes of a synced row under a scope rule that
-- reads other rows (path, members and sql rules; synchro.scopes_of evaluates the
-- rules that read only the row itself and hands these here). The steps of a
-- path rule, or of a members rule with a "path", are followed first, one row per
-- step by its key (a NULL column or a missing row: no scope); a path rule then
-- renders its template over the row reached, a members rule one scope per row of
-- its membership relation whose column holds the key of the row reached (the
-- synced row itself without a path). Materialization evaluates over projections
-- only (live = false, never live rows). Push's write policy passes live = true:
-- path and members rules then follow the live rows the pushing transaction sees
-- (so a parent written earlier in the same push counts); sql rules read what
-- synchro.projected gives, live rows in push's functions.
CREATE OR REPLACE FUNCTION synchro.scopes_by_lookup(rule jsonb, key text, image jsonb, live boolean)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cur jsonb := image;
    reached text := key;
    hop jsonb;
    gen uuid;  -- the projections' generation, looked up once per call
    scope text;
BEGIN
    IF rule ->> 'kind' = 'sql' THEN
        RETURN QUERY EXECUTE format(E'SELECT DISTINCT s::text FROM (%s\n) AS membership(s) WHERE s IS NOT NULL', rule ->> 'membership')
            USING image;
        RETURN;
    ELSIF rule ->> 'kind' IS DISTINCT FROM 'path' AND rule ->> 'kind' IS DISTINCT FROM 'members' THEN
        RAISE EXCEPTION 'synchro: invalid scope rule kind %', rule ->> 'kind' USING ERRCODE = 'data_corrupted';
    END IF;
    -- The steps by index rather than by a query over them, and a path rule's
    -- one scope returned by RETURN NEXT: a lookup per step is then the only
    -- query (about a quarter of the cost per row).
    IF NOT live THEN
        gen := synchro.projection_generation();
    END IF;
    FOR i IN 0 .. coalesce(jsonb_array_length(rule -> 'path'), 0) - 1 LOOP
        hop := rule -> 'path' -> i;
        IF cur ->> (hop ->> 'column') IS NULL THEN
            RETURN;
        END IF;
        IF live THEN
            SELECT l.key, l.image INTO reached, cur
            FROM synchro.live_rows((hop ->> 'relation_id')::bigint, NULL, ARRAY[cur ->> (hop ->> 'column')]) l;
        ELSE
            SELECT p.key, p.image INTO reached, cur
            FROM synchro.projection p
            WHERE p.relation_id = (hop ->> 'relation_id')::bigint AND p.key = cur ->> (hop ->> 'column')
              AND p.stream_generation = gen;
        END IF;
        IF cur IS NULL THEN
            RETURN;
        END IF;
    END LOOP;
    IF rule ->> 'kind' = 'path' THEN
        scope := synchro.render_template(rule ->> 'template', cur);
        IF scope IS NOT NULL THEN
            RETURN NEXT scope;
        END IF;
    ELSIF live THEN
        RETURN QUERY SELECT DISTINCT s
            FROM synchro.live_rows((rule ->> 'relation_id')::bigint, rule ->> 'column', ARRAY[reached]) m,
                 synchro.render_template(rule ->> 'template', m.image) s
            WHERE s IS NOT NULL;
    ELSE
        RETURN QUERY SELECT DISTINCT s
            FROM synchro.projection_lookup((rule ->> 'relation_id')::bigint, rule ->> 'column', ARRAY[reached]) m,
                 synchro.render_template(rule ->> 'template', m.image) s
            WHERE s IS NOT NULL;
    END IF;
END
$$;
