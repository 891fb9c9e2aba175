-- synchro.live_rows: keys and images (registered columns, to_jsonb rendering) of
-- the live rows of registered relation rid whose column col (NULL: the registered
-- key) holds one of vals (vals NULL: every row), as the calling transaction sees
-- them. Only push reads live rows (its write policy, and
-- synchro.materializable_scopes); materialization reads projections.
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
    -- The image drops the columns that are not registered ($2); OFFSET 0
    -- renders each row once.
    RETURN QUERY EXECUTE format(
        'SELECT x.j ->> %L, x.j - $2 FROM (SELECT to_jsonb(t) AS j FROM %I.%I t %s OFFSET 0) x',
        r.key_column, r.schema_name, r.relation_name,
        CASE WHEN vals IS NOT NULL THEN format('WHERE t.%I = ANY ($1::%s[])', col, typ) END)
        USING vals, ARRAY(SELECT a.attname::text FROM pg_attribute a
                          WHERE a.attrelid = r.relation_oid AND a.attnum > 0 AND NOT a.attisdropped
                            AND a.attname <> ALL (r.columns));
END
$$;
