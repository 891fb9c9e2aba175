-- synchro.path_referencing_keys: the keys of the rows of relation table_rid
-- whose rule path (normalized steps hops, as synchro.compile_rule_path gives
-- them) reaches, at step j, a row of that step's relation whose key is one of
-- keys: the steps are walked backwards from j to the first, each by the column
-- the step follows, over the projections (live = false, as materialization
-- does) or over the live rows the calling transaction sees (live = true).
-- synchro.impacted_keys walks path rules, and members rules with a path, so.
CREATE OR REPLACE FUNCTION synchro.path_referencing_keys(table_rid bigint, hops jsonb, j integer, keys text[], live boolean)
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    step_rid bigint;
BEGIN
    FOR i IN REVERSE j .. 0 LOOP
        step_rid := CASE WHEN i = 0 THEN table_rid ELSE (hops -> (i - 1) ->> 'relation_id')::bigint END;
        keys := CASE WHEN live THEN ARRAY(SELECT l.key FROM synchro.live_rows(step_rid, hops -> i ->> 'column', keys) l)
                     ELSE ARRAY(SELECT l.key FROM synchro.projection_lookup(step_rid, hops -> i ->> 'column', keys) l) END;
    END LOOP;
    RETURN keys;
END
$$;
