-- synchro.partition_guards: for every recorded partition, the fingerprint of its
-- truncate and partition guards: each guard's name, trigger oid and the xmin of
-- its pg_trigger row, so that disabling and enabling a guard again, or
-- dropping and creating it again, changes it (NULL without guards).
-- synchro.guard_partitions records it; synchro.catalog_drift compares (once
-- per catalog check, a trigger lookup per recorded partition).
CREATE OR REPLACE FUNCTION synchro.partition_guards()
RETURNS TABLE (relation_id bigint, partition_oid oid, guards text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
-- PL/pgSQL keeps the query's plan for the session.
AS $$
BEGIN
    RETURN QUERY
    SELECT rp.relation_id, rp.partition_oid, g.guards
    FROM synchro.relation_partition rp
    CROSS JOIN LATERAL (SELECT string_agg(format('%s:%s:%s', tg.tgname, tg.oid, tg.xmin), ',' ORDER BY tg.tgname) AS guards
                        FROM pg_trigger tg
                        WHERE tg.tgrelid = rp.partition_oid
                          AND tg.tgname IN ('synchro_truncate_guard', 'synchro_partition_guard')) g;
END
$$;
