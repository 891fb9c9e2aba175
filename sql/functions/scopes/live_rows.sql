-- synchro.live_rows: keys and images (registered columns, to_jsonb rendering) of
-- the live rows of registered relation rid whose column col (NULL: the registered
-- key) holds one of vals (vals NULL: every row), as the calling transaction sees
-- them. Only push reads live rows (its write policy, and
-- synchro.materializable_scopes); materialization reads projections.
-- While the transaction-local setting synchro.live_before holds
-- {"relation_id", "key", "image"} (only synchro.impact_allowed sets it, for the
-- length of its call), the rows of that relation are those before one write:
-- that key's row is read as image (absent when NULL) instead of as it is now.
CREATE OR REPLACE FUNCTION synchro.live_rows(rid bigint, col text, vals text[])
RETURNS TABLE (key text, image jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.relation;
    typ text;
    key_typ text;
    swap jsonb := nullif(current_setting('synchro.live_before', true), '')::jsonb;
BEGIN
    SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
    col := coalesce(col, r.key_column);
    SELECT format_type(a.atttypid, NULL) INTO STRICT typ
    FROM pg_attribute a WHERE a.attrelid = r.relation_oid AND a.attname = col AND NOT a.attisdropped;
    IF swap IS NOT NULL AND (swap ->> 'relation_id')::bigint <> rid THEN
        swap := NULL;
    END IF;
    IF swap IS NOT NULL THEN
        SELECT format_type(a.atttypid, NULL) INTO STRICT key_typ
        FROM pg_attribute a WHERE a.attrelid = r.relation_oid AND a.attname = r.key_column AND NOT a.attisdropped;
    END IF;
    -- The image drops the columns that are not registered ($2); OFFSET 0
    -- renders each row once.
    RETURN QUERY EXECUTE format(
        'SELECT x.j ->> %1$L, x.j - $2 FROM (SELECT to_jsonb(t) AS j FROM %2$I.%3$I t WHERE true %4$s %5$s OFFSET 0) x %6$s',
        r.key_column, r.schema_name, r.relation_name,
        CASE WHEN vals IS NOT NULL THEN format('AND t.%I = ANY ($1::%s[])', col, typ) END,
        CASE WHEN swap IS NOT NULL THEN format('AND t.%I <> $3::%s', r.key_column, key_typ) END,
        CASE WHEN swap IS NOT NULL THEN format('UNION ALL SELECT $4 ->> %L, $4 - $2 WHERE $4 IS NOT NULL %s', r.key_column,
            CASE WHEN vals IS NOT NULL THEN format('AND ($4 ->> %L)::%s = ANY ($1::%s[])', col, typ, typ) END) END)
        USING vals, ARRAY(SELECT a.attname::text FROM pg_attribute a
                          WHERE a.attrelid = r.relation_oid AND a.attnum > 0 AND NOT a.attisdropped
                            AND a.attname <> ALL (r.columns)),
              swap ->> 'key', nullif(swap -> 'image', 'null');
END
$$;
