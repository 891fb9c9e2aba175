-- synchro.impacted_keys: keys of synced table tid whose membership may change when
-- row (rid, key) of a relation its rule reads changed from old_image to new_image
-- (either may be NULL). Path rules walk the foreign-key steps backwards over the
-- projections (live = false, as materialization does) or over the live rows the
-- calling transaction sees (live = true: synchro.materializable_scopes, which
-- also makes the impact queries of sql rules read live rows); members rules take
-- the referenced key before and after; sql rules run the registered impact query
-- on both images.
DROP FUNCTION IF EXISTS synchro.impacted_keys(integer, bigint, text, jsonb, jsonb);
CREATE OR REPLACE FUNCTION synchro.impacted_keys(tid integer, rid bigint, key text, old_image jsonb, new_image jsonb, live boolean)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rule jsonb;
    table_rid bigint;
    step_rid bigint;
    hops jsonb;
    keys text[];
    img jsonb;
BEGIN
    SELECT t.scope_rule, t.relation_id INTO rule, table_rid FROM synchro.synced_table t WHERE t.table_id = tid;
    CASE rule ->> 'kind'
    WHEN 'path' THEN
        hops := rule -> 'path';
        FOR j IN 0 .. jsonb_array_length(hops) - 1 LOOP
            CONTINUE WHEN (hops -> j ->> 'relation_id')::bigint <> rid;
            keys := ARRAY[key];
            FOR i IN REVERSE j .. 0 LOOP
                step_rid := CASE WHEN i = 0 THEN table_rid ELSE (hops -> (i - 1) ->> 'relation_id')::bigint END;
                keys := CASE WHEN live THEN ARRAY(SELECT l.key FROM synchro.live_rows(step_rid, hops -> i ->> 'column', keys) l)
                             ELSE ARRAY(SELECT l.key FROM synchro.projection_lookup(step_rid, hops -> i ->> 'column', keys) l) END;
            END LOOP;
            RETURN QUERY SELECT unnest(keys);
        END LOOP;
    WHEN 'members' THEN
        RETURN QUERY SELECT DISTINCT k FROM (VALUES (old_image ->> (rule ->> 'column')), (new_image ->> (rule ->> 'column'))) v(k)
            WHERE k IS NOT NULL;
    WHEN 'sql' THEN
        FOREACH img IN ARRAY ARRAY[old_image, new_image] LOOP
            CONTINUE WHEN img IS NULL;
            RETURN QUERY EXECUTE format(E'SELECT DISTINCT k::text FROM (%s\n) AS impact(k) WHERE k IS NOT NULL',
                                        rule -> 'impacts' -> rid::text ->> 'query')
                USING img;
        END LOOP;
    ELSE
        RETURN;
    END CASE;
END
$$;
