-- synchro.materializable_scopes: guarantees, for a push mutation just written
-- (row key of synced table t; its live images before and after the write, NULL
-- for an insert's before and a delete's after), that the scope rules
-- materialization will evaluate for it evaluate without error and give no scope
-- id longer than synchro.max_scope_bytes(), and returns the row's scopes after
-- the write (none for a delete). Otherwise it raises SQLSTATE SYCAP naming the
-- synced table whose rule fails, never a value, and push rejects the mutation
-- alone (validation_failed). It evaluates the row's own rule and, for every
-- synced table whose rule reads t (synchro.rule_read), the impacted rows
-- (synchro.impacted_rows) and their rules, over the live rows the push's
-- transaction sees (synchro.rule_reads = 'live'). Errors that make
-- materialization retry (connection, serialization, deadlock, lock timeout,
-- resources, cancellation) pass through unchanged. Why, and the window it
-- cannot see: docs/decisions.md, "A push does not block capture", and
-- docs/registration.md.
CREATE OR REPLACE FUNCTION synchro.materializable_scopes(t synchro.synced_table, key text, before jsonb, after jsonb)
RETURNS text[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET synchro.rule_reads = 'live'
AS $$
DECLARE
    old_image jsonb;
    new_image jsonb;
    own text[] := '{}';
    s record;
    impacted text[];
    scopes text[];
    longest integer;
BEGIN
    -- The images as materialization holds them: registered columns only.
    old_image := synchro.registered_image(t.relation_id, before);
    new_image := synchro.registered_image(t.relation_id, after);
    FOR s IN
        SELECT st.table_id, st.name, st.relation_id, st.scope_rule, rr.table_id IS NOT NULL AS reads
        FROM synchro.synced_table st
        LEFT JOIN synchro.rule_read rr ON rr.table_id = st.table_id AND rr.relation_id = t.relation_id
        WHERE st.table_id = t.table_id OR rr.table_id IS NOT NULL
        ORDER BY st.table_id <> t.table_id, st.table_id
    LOOP
        BEGIN
            impacted := '{}';
            IF s.reads THEN
                impacted := synchro.impacted_rows(s.table_id, t, materializable_scopes.key, old_image, new_image);
            END IF;
            SELECT max(octet_length(x.scope)), coalesce(array_agg(x.scope) FILTER (WHERE x.own), '{}')
            INTO longest, scopes
            FROM (SELECT true AS own, sc AS scope
                  FROM synchro.scopes_of(s.scope_rule, materializable_scopes.key, new_image, true) sc
                  WHERE s.table_id = t.table_id AND new_image IS NOT NULL
                  UNION ALL
                  SELECT false, sc
                  FROM synchro.live_rows(s.relation_id, NULL, impacted) l,
                       synchro.scopes_of(s.scope_rule, l.key, l.image, true) sc
                  WHERE cardinality(impacted) > 0) x;
        EXCEPTION WHEN OTHERS THEN
            IF left(SQLSTATE, 2) IN ('08', '40', '53', '57', '58') OR SQLSTATE IN ('55P03', '25P03', '25P04') THEN
                RAISE;
            END IF;
            RAISE EXCEPTION 'the scope rule of table "%" fails on a row this change affects', s.name USING ERRCODE = 'SYCAP';
        END;
        IF longest > synchro.max_scope_bytes() THEN
            RAISE EXCEPTION 'a row of table "%" would belong to a scope id longer than % bytes', s.name, synchro.max_scope_bytes()
                USING ERRCODE = 'SYCAP';
        END IF;
        IF s.table_id = t.table_id THEN
            own := scopes;
        END IF;
    END LOOP;
    RETURN own;
END
$$;
