-- synchro.projected: the projected rows (key, image) of a registered relation, for
-- custom ("sql") scope rules. It reads projections only, never live rows.
CREATE OR REPLACE FUNCTION synchro.projected(relation regclass)
RETURNS TABLE (key text, image jsonb)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.key, p.image
    FROM synchro.projection p
    JOIN synchro.relation r ON r.relation_id = p.relation_id
    WHERE r.relation_oid = relation::oid
$$;
