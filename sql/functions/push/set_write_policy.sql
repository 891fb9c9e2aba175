-- synchro.set_write_policy: replaces the default push write policy of a synced
-- table with fn, a function (user_id text, op text, table_name text, before
-- jsonb, after jsonb) RETURNS boolean; before/after are the row's live images
-- (NULL for insert/delete). NULL restores the default: the row must belong,
-- before and after, to a scope assigned to the user.
CREATE OR REPLACE FUNCTION synchro.set_write_policy(relation regclass, fn regprocedure)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tid integer := (SELECT t.table_id FROM synchro.synced_table t JOIN synchro.relation r USING (relation_id)
                    WHERE r.relation_oid = relation::oid);
BEGIN
    IF tid IS NULL THEN
        RAISE EXCEPTION 'synchro: write policy rejected: % is not a synced table', relation
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF fn IS NOT NULL AND NOT EXISTS (
        SELECT FROM pg_proc p
        WHERE p.oid = fn AND NOT p.proretset AND p.prorettype = 'boolean'::regtype AND p.prokind = 'f'
          AND ARRAY(SELECT unnest(p.proargtypes::oid[])) = ARRAY['text', 'text', 'text', 'jsonb', 'jsonb']::regtype[]::oid[]) THEN
        RAISE EXCEPTION 'synchro: write policy % rejected: it must be a function (user_id text, op text, table_name text, before jsonb, after jsonb) RETURNS boolean', fn
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF fn IS NULL THEN
        DELETE FROM synchro.write_policy WHERE table_id = tid;
    ELSE
        INSERT INTO synchro.write_policy (table_id, policy) VALUES (tid, fn)
        ON CONFLICT (table_id) DO UPDATE SET policy = EXCLUDED.policy;
    END IF;
END
$$;
