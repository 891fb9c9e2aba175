-- synchro.record_decoded_enum_labels: called by synchro.materialize_transaction
-- for the batch's new transactions (synchro_seg_txn) and their staged events
-- (synchro_seg_event): for every label a registered column of an enum type (a
-- domain over one, an array of either: synchro.enum_label_type) carries in an
-- image, it records in synchro.relation_enum_label the value that has that
-- label now, when that value is not recorded yet, so that renaming it later is
-- catalog drift even when the worker has not recorded it since ALTER TYPE ...
-- ADD VALUE. A label its type no longer has was renamed after the row was
-- written (the row changed without a row event: the value was added, written
-- and renamed before anything recorded it, or renamed while the row waited to
-- be materialized): it records it under enum_value 0, which no value has, and
-- synchro.catalog_drift reports it until synchro.accept_rewrite records the
-- labels again. Returns how many it recorded.
CREATE OR REPLACE FUNCTION synchro.record_decoded_enum_labels()
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rids bigint[];
    cols name[];
    enums oid[];
    arrays boolean[];
    recorded integer;
BEGIN
    -- The enum columns of the batch's relations, each column type looked up once.
    WITH col AS MATERIALIZED (
             SELECT r.relation_id, u.col, u.typ
             FROM synchro.relation r
             CROSS JOIN LATERAL unnest(r.columns, r.column_types) u(col, typ)
             WHERE r.relation_id IN (SELECT DISTINCT s.r FROM synchro_seg_event s)),
         typ AS MATERIALIZED (
             SELECT d.typ, l.enum_type, l.in_array
             FROM (SELECT DISTINCT col.typ FROM col) d
             CROSS JOIN LATERAL synchro.enum_label_type(d.typ) l
             WHERE l.enum_type IS NOT NULL)
    SELECT array_agg(col.relation_id), array_agg(col.col), array_agg(typ.enum_type), array_agg(typ.in_array)
    INTO rids, cols, enums, arrays
    FROM col JOIN typ USING (typ);
    IF rids IS NULL THEN
        RETURN 0;
    END IF;
    INSERT INTO synchro.relation_enum_label (relation_id, enum_value, enum_type, label)
    SELECT l.relation_id, coalesce(e.oid, 0), l.enum_type, l.label
    FROM (SELECT DISTINCT c.relation_id, c.enum_type, v.label
          FROM unnest(rids, cols, enums, arrays) c(relation_id, col, enum_type, in_array)
          JOIN synchro_seg_event s ON s.r = c.relation_id
          CROSS JOIN LATERAL unnest(CASE WHEN c.in_array THEN (s.img ->> c.col)::text[]
                                         ELSE ARRAY[s.img ->> c.col] END) v(label)
          WHERE v.label IS NOT NULL AND s.seq IN (SELECT t.seq FROM synchro_seg_txn t)) l
    LEFT JOIN pg_enum e ON e.enumtypid = l.enum_type AND e.enumlabel = l.label::name
    ON CONFLICT (relation_id, enum_value) DO NOTHING;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    RETURN recorded;
END
$$;
