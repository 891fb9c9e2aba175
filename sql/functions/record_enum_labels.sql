-- synchro.record_enum_labels: records in synchro.relation_enum_label the label of
-- every value of the enum types of the registered columns of relation rid (by
-- default: of every registered relation) that is not recorded yet, and with
-- overwrite also the current label of every recorded value; returns how many
-- it recorded. ALTER TYPE ... RENAME VALUE changes the text of the rows holding
-- a value without row events: a recorded value whose label changed is catalog
-- drift (synchro.catalog_drift), so only synchro.accept_rewrite overwrites.
-- Registration records its relation's values; the worker records values added
-- since (ALTER TYPE ... ADD VALUE) at each catalog check that finds no drift. A
-- value added and renamed before the worker's next check is recorded under
-- its new name.
CREATE OR REPLACE FUNCTION synchro.record_enum_labels(rid bigint DEFAULT NULL, overwrite boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    recorded integer;
BEGIN
    INSERT INTO synchro.relation_enum_label AS el (relation_id, enum_value, enum_type, label)
    SELECT DISTINCT r.relation_id, e.oid, e.enumtypid, e.enumlabel
    FROM synchro.relation r
    CROSS JOIN LATERAL unnest(r.column_types) u(typ)
    JOIN pg_enum e ON e.enumtypid = u.typ
    WHERE (rid IS NULL OR r.relation_id = rid)
      AND (overwrite OR NOT EXISTS (SELECT FROM synchro.relation_enum_label x
                                    WHERE x.relation_id = r.relation_id AND x.enum_value = e.oid))
    ON CONFLICT (relation_id, enum_value) DO UPDATE SET label = excluded.label
        WHERE overwrite AND el.label IS DISTINCT FROM excluded.label;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    RETURN recorded;
END
$$;
