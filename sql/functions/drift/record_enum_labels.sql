-- synchro.record_enum_labels: records in synchro.relation_enum_label the label of
-- every value of the enum types the registered columns of relation rid (by
-- default: of every registered relation) can hold (synchro.enum_types: also
-- through a domain, an array, a range or a composite type) that is not recorded
-- yet, and with overwrite also the current label of every recorded value,
-- forgetting recorded values its types no longer have (and the labels
-- synchro.record_decoded_enum_labels found renamed); returns how many it
-- recorded. ALTER TYPE ... RENAME VALUE changes the text of the rows holding a
-- value without row events: a recorded value whose label changed is catalog
-- drift (synchro.catalog_drift), so only synchro.accept_rewrite overwrites.
-- Registration records its relation's values; the worker records values added
-- since (ALTER TYPE ... ADD VALUE) at each catalog check, and materialization
-- records the values the rows it materializes hold. A value added, written and
-- renamed before either recorded it is recorded here under its new name; the
-- rows written with the old one are then found by materialization.
CREATE OR REPLACE FUNCTION synchro.record_enum_labels(rid bigint DEFAULT NULL, overwrite boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    recorded integer;
BEGIN
    IF overwrite THEN
        DELETE FROM synchro.relation_enum_label el
        WHERE (rid IS NULL OR el.relation_id = rid)
          AND NOT EXISTS (SELECT FROM pg_enum e WHERE e.oid = el.enum_value);
    END IF;
    -- The column types of the relations, each looked up once.
    WITH col AS MATERIALIZED (
             SELECT DISTINCT r.relation_id, u.typ
             FROM synchro.relation r CROSS JOIN LATERAL unnest(r.column_types) u(typ)
             WHERE rid IS NULL OR r.relation_id = rid),
         typ AS MATERIALIZED (
             SELECT d.typ, t.enum_type
             FROM (SELECT DISTINCT col.typ FROM col) d CROSS JOIN LATERAL synchro.enum_types(d.typ) t(enum_type))
    INSERT INTO synchro.relation_enum_label AS el (relation_id, enum_value, enum_type, label)
    SELECT DISTINCT col.relation_id, e.oid, e.enumtypid, e.enumlabel
    FROM col
    JOIN typ USING (typ)
    JOIN pg_enum e ON e.enumtypid = typ.enum_type
    WHERE overwrite OR NOT EXISTS (SELECT FROM synchro.relation_enum_label x
                                   WHERE x.relation_id = col.relation_id AND x.enum_value = e.oid)
    ON CONFLICT (relation_id, enum_value) DO UPDATE SET label = excluded.label
        WHERE overwrite AND el.label IS DISTINCT FROM excluded.label;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    RETURN recorded;
END
$$;
