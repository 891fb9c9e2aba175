-- synchro.impacted_rows: the keys of the rows of synced table tid, whose scope
-- rule reads the relation of synced table t (synchro.rule_read), whose
-- membership the change of row key of t from old_image to new_image
-- (registered columns; either NULL) may change, as push's transaction sees the
-- live rows (synchro.impacted_keys, live). Only rows that passed a fence
-- (synchro.row_head: a row written before its table was registered is not
-- projected), or of a table waiting for its projection bootstrap (its rows
-- written before the registration get their row heads, and scopes, at its
-- activation), and never the changed row itself. Keys of an integer-keyed
-- table that are not numbers raise 22P02 (the impact query gave garbage).
CREATE OR REPLACE FUNCTION synchro.impacted_rows(tid integer, t synchro.synced_table, key text, old_image jsonb, new_image jsonb)
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    impacted text[];
BEGIN
    SELECT st.relation_id, r.key_type, r.bootstrap_pending INTO STRICT s
    FROM synchro.synced_table st JOIN synchro.relation r ON r.relation_id = st.relation_id WHERE st.table_id = tid;
    impacted := ARRAY(SELECT DISTINCT k FROM synchro.impacted_keys(tid, t.relation_id, key, old_image, new_image, true) k);
    IF s.key_type <> 'string' THEN
        PERFORM max(k::numeric) FROM unnest(impacted) k;
    END IF;
    IF s.bootstrap_pending THEN
        RETURN ARRAY(SELECT k FROM unnest(impacted) k WHERE NOT (tid = t.table_id AND k = impacted_rows.key));
    END IF;
    RETURN ARRAY(SELECT h.key FROM synchro.row_head h
                 WHERE h.relation_id = s.relation_id AND h.key = ANY (impacted)
                   AND NOT (tid = t.table_id AND h.key = impacted_rows.key));
END
$$;
