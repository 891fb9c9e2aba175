-- synchro.impact_allowed: the default write policy's rule for the rows of
-- other synced tables whose rules read the row a push mutation just wrote (row
-- key of synced table t, its live images before and after the write). Every
-- such row (synchro.impacted_rows) that the write gives a scope it did not
-- have must have been writable by the pushing user before the write (in a
-- scope of assigned), or have been created by the same push: a user may share
-- a row they may write, never join (or adopt) another's row through a
-- membership or parent row of their own. "Before" is the live state with the
-- written row read as its before image (setting synchro.live_before, read by
-- synchro.live_rows), so it is exact for every rule kind; effects of the
-- mutation's own triggers on other tables are not undone there.
CREATE OR REPLACE FUNCTION synchro.impact_allowed(t synchro.synced_table, assigned text[], key text, before jsonb, after jsonb)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET synchro.rule_reads = 'live'
SET synchro.live_before = ''
AS $$
DECLARE
    old_image jsonb := synchro.registered_image(t.relation_id, before);
    new_image jsonb := synchro.registered_image(t.relation_id, after);
    s record;
    keys text[];
    now_scopes jsonb;
    then_scopes jsonb;
    k text;
BEGIN
    FOR s IN
        SELECT st.table_id, st.relation_id, st.scope_rule
        FROM synchro.synced_table st JOIN synchro.rule_read rr ON rr.table_id = st.table_id
        WHERE rr.relation_id = t.relation_id
    LOOP
        keys := synchro.impacted_rows(s.table_id, t, key, old_image, new_image);
        CONTINUE WHEN cardinality(keys) = 0;
        PERFORM set_config('synchro.live_before', '', true);
        now_scopes := (SELECT jsonb_object_agg(l.key, ARRAY(SELECT sc FROM synchro.scopes_of(s.scope_rule, l.key, l.image, true) sc))
                       FROM synchro.live_rows(s.relation_id, NULL, keys) l);
        PERFORM set_config('synchro.live_before',
                           jsonb_build_object('relation_id', t.relation_id, 'key', key, 'image', old_image)::text, true);
        then_scopes := (SELECT jsonb_object_agg(l.key, ARRAY(SELECT sc FROM synchro.scopes_of(s.scope_rule, l.key, l.image, true) sc))
                        FROM synchro.live_rows(s.relation_id, NULL, keys) l);
        FOREACH k IN ARRAY keys LOOP
            CONTINUE WHEN NOT EXISTS (SELECT FROM jsonb_array_elements_text(coalesce(now_scopes -> k, '[]')) g
                                      WHERE NOT coalesce(then_scopes -> k, '[]') ? g);
            CONTINUE WHEN ARRAY(SELECT jsonb_array_elements_text(coalesce(then_scopes -> k, '[]'))) && assigned;
            -- Created by this push: an insert fence of this transaction, bound
            -- to the pushing client (synchro.fence_pending holds it until capture).
            CONTINUE WHEN EXISTS (SELECT FROM synchro.fence_pending p JOIN synchro.fence f ON f.fence_id = p.fence_id
                                  WHERE p.client_id = current_setting('synchro.client_id', true)
                                    AND f.relation_id = s.relation_id AND f.key = k AND f.op = 'insert'
                                    AND f.xid = pg_current_xact_id());
            RETURN false;
        END LOOP;
    END LOOP;
    RETURN true;
END
$$;
