-- synchro.registered_image: a live row image (to_jsonb of the row) of registered
-- relation rid as materialization holds it: its registered columns only. NULL
-- stays NULL. PL/pgSQL, so that its query is planned once per session: as a SQL
-- function with a SET clause it was planned again on every call (0.19 ms, four
-- calls per push mutation; docs/decisions.md, "Push throughput: SQL on hot paths").
CREATE OR REPLACE FUNCTION synchro.registered_image(rid bigint, image jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN image - ARRAY(SELECT a.attname::text FROM synchro.relation r
                         JOIN pg_attribute a ON a.attrelid = r.relation_oid AND a.attnum > 0 AND NOT a.attisdropped
                         WHERE r.relation_id = rid AND a.attname <> ALL (r.columns));
END
$$;
