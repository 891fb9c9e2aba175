-- synchro.live_rows: keys and images (registered columns, to_jsonb rendering) of
-- the live rows of registered relation rid whose column col (NULL: the registered
-- key) holds one of vals, as the calling transaction sees them. Only push's write
-- policy reads live rows; materialization reads projections.
CREATE OR REPLACE FUNCTION synchro.live_rows(rid bigint, col text, vals text[])
RETURNS TABLE (key text, image jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.relation;
    typ text;
BEGIN
    SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
    col := coalesce(col, r.key_column);
    SELECT format_type(a.atttypid, NULL) INTO STRICT typ
    FROM pg_attribute a WHERE a.attrelid = r.relation_oid AND a.attname = col AND NOT a.attisdropped;
    RETURN QUERY EXECUTE format(
        'SELECT to_jsonb(t) ->> %L, (SELECT jsonb_object_agg(j.key, j.value) FROM jsonb_each(to_jsonb(t)) j WHERE j.key = ANY ($2))
         FROM %I.%I t WHERE t.%I = ANY ($1::%s[])',
        r.key_column, r.schema_name, r.relation_name, col, typ) USING vals, r.columns::text[];
END
$$;
