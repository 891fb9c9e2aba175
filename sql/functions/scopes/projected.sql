-- synchro.projected: the projected rows (key, image) of a registered relation, for
-- custom ("sql") scope rules. It reads projections (of the generation
-- synchro.projection_generation names), never live rows, except
-- while the setting synchro.rule_reads is 'live': push's functions
-- (synchro.apply_mutation, synchro.write_allowed, synchro.materializable_scopes,
-- synchro.impact_allowed) set it for the length of their call, so that push
-- authorizes and checks over the live rows its transaction sees, as
-- materialization will evaluate them over projections at its commit;
-- materialization pins it off. The setting gates each branch as a one-time
-- filter, so the other one never runs.
CREATE OR REPLACE FUNCTION synchro.projected(relation regclass)
RETURNS TABLE (key text, image jsonb)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.key, p.image
    FROM synchro.projection p
    JOIN synchro.relation r ON r.relation_id = p.relation_id
    WHERE r.relation_oid = relation::oid AND current_setting('synchro.rule_reads', true) IS DISTINCT FROM 'live'
      AND p.stream_generation = synchro.projection_generation()
    UNION ALL
    SELECT l.key, l.image
    FROM synchro.relation r CROSS JOIN LATERAL synchro.live_rows(r.relation_id, NULL, NULL) l
    WHERE r.relation_oid = relation::oid AND current_setting('synchro.rule_reads', true) = 'live'
$$;
