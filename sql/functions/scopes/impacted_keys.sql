-- synchro.impacted_keys: keys of synced table tid whose membership may change when
-- row (rid, key) of a relation its rule reads changed from old_image to new_image
-- (either may be NULL). A change of a path step's relation (path rules, and
-- members rules with a "path") walks the steps backwards from it
-- (synchro.path_referencing_keys) over the projections (live = false, as
-- materialization does) or over the live rows the calling transaction sees
-- (live = true: synchro.materializable_scopes, which also makes the impact
-- queries of sql rules read live rows); a change of a members rule's membership
-- relation takes the referenced key before and after, the synced rows
-- themselves, or, with a path, the rows whose path reaches them; sql rules run
-- the registered impact query on both images.
DROP FUNCTION IF EXISTS synchro.impacted_keys(integer, bigint, text, jsonb, jsonb);
CREATE OR REPLACE FUNCTION synchro.impacted_keys(tid integer, rid bigint, key text, old_image jsonb, new_image jsonb, live boolean)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rule jsonb;
    table_rid bigint;
    hops jsonb;
    keys text[];
    img jsonb;
BEGIN
    SELECT t.scope_rule, t.relation_id INTO rule, table_rid FROM synchro.synced_table t WHERE t.table_id = tid;
    CASE rule ->> 'kind'
    WHEN 'path', 'members' THEN
        hops := coalesce(rule -> 'path', '[]');
        IF rule ->> 'kind' = 'members' AND (rule ->> 'relation_id')::bigint = rid THEN
            keys := ARRAY(SELECT DISTINCT k FROM (VALUES (old_image ->> (rule ->> 'column')), (new_image ->> (rule ->> 'column'))) v(k)
                          WHERE k IS NOT NULL);
            IF jsonb_array_length(hops) > 0 THEN
                keys := synchro.path_referencing_keys(table_rid, hops, jsonb_array_length(hops) - 1, keys, live);
            END IF;
            RETURN QUERY SELECT unnest(keys);
        END IF;
        FOR j IN 0 .. jsonb_array_length(hops) - 1 LOOP
            CONTINUE WHEN (hops -> j ->> 'relation_id')::bigint <> rid;
            RETURN QUERY SELECT unnest(synchro.path_referencing_keys(table_rid, hops, j, ARRAY[key], live));
        END LOOP;
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
