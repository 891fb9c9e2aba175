-- synchro.assigned_scopes: the scopes assigned to a user now, sorted and distinct
-- (blank ids dropped): the configured assignment function's result, or by default
-- user:<user_id> plus every shared scope. Evaluated live, never during
-- materialization.
CREATE OR REPLACE FUNCTION synchro.assigned_scopes(user_id text)
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn regprocedure := (SELECT s.scope_assignment FROM synchro.settings s);
    scopes text[];
BEGIN
    IF fn IS NULL THEN
        scopes := ARRAY['user:' || user_id] || ARRAY(SELECT s.scope FROM synchro.shared_scope s);
    ELSE
        EXECUTE format('SELECT array_agg(s) FROM %s($1) s', fn::oid::regproc) INTO scopes USING user_id;
    END IF;
    RETURN ARRAY(SELECT DISTINCT s COLLATE "C" FROM unnest(scopes) s WHERE s IS NOT NULL AND s <> '' ORDER BY 1);
END
$$;
