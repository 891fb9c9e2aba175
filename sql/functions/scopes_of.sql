-- synchro.scopes_of: the scopes a synced row with the given projected image belongs
-- to under its table's (normalized) scope rule, evaluated over projections only
-- (never live rows).
CREATE OR REPLACE FUNCTION synchro.scopes_of(rule jsonb, key text, image jsonb)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog
AS $$
DECLARE
    cur jsonb := image;
    hop jsonb;
BEGIN
    CASE rule ->> 'kind'
    WHEN 'shared' THEN
        RETURN NEXT rule ->> 'scope';
    WHEN 'column' THEN
        RETURN QUERY SELECT s FROM synchro.render_template(rule ->> 'template', image) s WHERE s IS NOT NULL;
    WHEN 'path' THEN
        FOR hop IN SELECT * FROM jsonb_array_elements(rule -> 'path') LOOP
            IF cur ->> (hop ->> 'column') IS NULL THEN
                RETURN;
            END IF;
            cur := (SELECT p.image FROM synchro.projection p
                    WHERE p.relation_id = (hop ->> 'relation_id')::bigint AND p.key = cur ->> (hop ->> 'column'));
            IF cur IS NULL THEN
                RETURN;
            END IF;
        END LOOP;
        RETURN QUERY SELECT s FROM synchro.render_template(rule ->> 'template', cur) s WHERE s IS NOT NULL;
    WHEN 'members' THEN
        RETURN QUERY SELECT DISTINCT s
            FROM synchro.projection_lookup((rule ->> 'relation_id')::bigint, rule ->> 'column', ARRAY[key]) m,
                 synchro.render_template(rule ->> 'template', m.image) s
            WHERE s IS NOT NULL;
    WHEN 'sql' THEN
        RETURN QUERY EXECUTE format('SELECT DISTINCT s::text FROM (%s) AS membership(s) WHERE s IS NOT NULL', rule ->> 'membership')
            USING image;
    ELSE
        RAISE EXCEPTION 'synchro: invalid scope rule kind %', rule ->> 'kind' USING ERRCODE = 'data_corrupted';
    END CASE;
END
$$;
