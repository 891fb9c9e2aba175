-- synchro.write_allowed: the push write policy of synced table t for user_id,
-- asked twice per mutation: phase 'before' ahead of the write, phase 'after' once
-- it is done (and rolled back when refused). A registered custom policy
-- (synchro.set_write_policy) decides alone, in phase 'after', seeing both images.
-- Otherwise the row must belong, before (update, delete) and after (insert,
-- update), to at least one scope in assigned (an insert may also create a row
-- in no scope at all, which nobody reads: a doc whose first membership the same
-- push writes next), and in phase 'after' the write may give a scope only to
-- rows of other tables the user could write before or this push created
-- (synchro.impact_allowed). Both are evaluated with the scope rules over the
-- live rows the pushing transaction sees (synchro.scopes_of, live; sql rules'
-- synchro.projected reads live rows too: never a lagging projection).
CREATE OR REPLACE FUNCTION synchro.write_allowed(t synchro.synced_table, user_id text, assigned text[], op text,
                                                key text, before jsonb, after jsonb, phase text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET synchro.rule_reads = 'live'
AS $$
DECLARE
    fn regprocedure := (SELECT w.policy FROM synchro.write_policy w WHERE w.table_id = t.table_id);
    image jsonb := CASE phase WHEN 'before' THEN before ELSE after END;
    allowed boolean;
    scopes text[];
BEGIN
    IF fn IS NOT NULL THEN
        IF phase = 'before' THEN
            RETURN true;
        END IF;
        EXECUTE format('SELECT %s($1, $2, $3, $4, $5)', fn::oid::regproc) INTO allowed USING user_id, op, t.name, before, after;
        RETURN coalesce(allowed, false);
    END IF;
    IF image IS NOT NULL THEN
        scopes := ARRAY(SELECT s FROM synchro.scopes_of(t.scope_rule, key, image, true) s);
        IF NOT (scopes && assigned OR (op = 'insert' AND cardinality(scopes) = 0)) THEN
            RETURN false;
        END IF;
    END IF;
    -- Most tables no rule reads: no call (and no images to compute) for them.
    RETURN phase = 'before'
        OR NOT EXISTS (SELECT FROM synchro.rule_read rr WHERE rr.relation_id = t.relation_id)
        OR synchro.impact_allowed(t, assigned, key, before, after);
END
$$;
