-- synchro.ensure_rule_indexes: the projection indexes that evaluating the
-- compiled scope rule of synced relation rid needs: rule evaluation finds rows
-- by the columns path and members rules follow (the steps of a path, a members
-- rule's with one too, walked backwards, and a members rule's column).
CREATE OR REPLACE FUNCTION synchro.ensure_rule_indexes(rid bigint, rule jsonb)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF rule ->> 'kind' IN ('path', 'members') AND rule ? 'path' THEN
        FOR i IN 0 .. jsonb_array_length(rule -> 'path') - 1 LOOP
            PERFORM synchro.ensure_projection_index(
                CASE WHEN i = 0 THEN rid ELSE (rule -> 'path' -> (i - 1) ->> 'relation_id')::bigint END,
                rule -> 'path' -> i ->> 'column');
        END LOOP;
    END IF;
    IF rule ->> 'kind' = 'members' THEN
        PERFORM synchro.ensure_projection_index((rule ->> 'relation_id')::bigint, rule ->> 'column');
    END IF;
END
$$;
