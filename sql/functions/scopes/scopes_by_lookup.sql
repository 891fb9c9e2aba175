-- synchro.scopes_by_lookup: the scopes of a synced row under a scope rule that
-- reads other rows (path, members and sql rules; synchro.scopes_of evaluates the
-- rules that read only the row itself and hands these here). Materialization
-- evaluates over projections only (live = false, never live rows). Push's write
-- policy passes live = true: path and members rules then follow the live rows the
-- pushing transaction sees (so a parent written earlier in the same push counts);
-- sql rules read what synchro.projected gives, live rows in push's functions.
CREATE OR REPLACE FUNCTION synchro.scopes_by_lookup(rule jsonb, key text, image jsonb, live boolean)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cur jsonb := image;
    hop jsonb;
BEGIN
    CASE rule ->> 'kind'
    WHEN 'path' THEN
        FOR hop IN SELECT * FROM jsonb_array_elements(rule -> 'path') LOOP
            IF cur ->> (hop ->> 'column') IS NULL THEN
                RETURN;
            END IF;
            IF live THEN
                cur := (SELECT l.image FROM synchro.live_rows((hop ->> 'relation_id')::bigint, NULL, ARRAY[cur ->> (hop ->> 'column')]) l);
            ELSE
                cur := (SELECT p.image FROM synchro.projection p
                        WHERE p.relation_id = (hop ->> 'relation_id')::bigint AND p.key = cur ->> (hop ->> 'column')
                          AND p.stream_generation = synchro.projection_generation());
            END IF;
            IF cur IS NULL THEN
                RETURN;
            END IF;
        END LOOP;
        RETURN QUERY SELECT s FROM synchro.render_template(rule ->> 'template', cur) s WHERE s IS NOT NULL;
    WHEN 'members' THEN
        IF live THEN
            RETURN QUERY SELECT DISTINCT s
                FROM synchro.live_rows((rule ->> 'relation_id')::bigint, rule ->> 'column', ARRAY[key]) m,
                     synchro.render_template(rule ->> 'template', m.image) s
                WHERE s IS NOT NULL;
        ELSE
            RETURN QUERY SELECT DISTINCT s
                FROM synchro.projection_lookup((rule ->> 'relation_id')::bigint, rule ->> 'column', ARRAY[key]) m,
                     synchro.render_template(rule ->> 'template', m.image) s
                WHERE s IS NOT NULL;
        END IF;
    WHEN 'sql' THEN
        RETURN QUERY EXECUTE format(E'SELECT DISTINCT s::text FROM (%s\n) AS membership(s) WHERE s IS NOT NULL', rule ->> 'membership')
            USING image;
    ELSE
        RAISE EXCEPTION 'synchro: invalid scope rule kind %', rule ->> 'kind' USING ERRCODE = 'data_corrupted';
    END CASE;
END
$$;
