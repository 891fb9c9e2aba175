-- synchro.set_scope_assignment: replaces the scope assignment rule with fn, a
-- function (user_id text) RETURNS SETOF text evaluated live at connect, push,
-- pull and rebuild; NULL restores the default (user:<user_id> plus every shared
-- scope). A client's scope_set_version moves when its assigned set changes.
CREATE OR REPLACE FUNCTION synchro.set_scope_assignment(fn regprocedure)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF fn IS NOT NULL AND NOT EXISTS (
        SELECT FROM pg_proc p
        WHERE p.oid = fn AND p.proretset AND p.prorettype = 'text'::regtype
          AND p.pronargs = 1 AND p.proargtypes[0] = 'text'::regtype AND p.prokind = 'f') THEN
        RAISE EXCEPTION 'synchro: scope assignment % rejected: it must be a function (user_id text) RETURNS SETOF text', fn
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE synchro.settings SET scope_assignment = fn;
    -- Waiting pulls answer again: their clients' scope sets may have changed.
    PERFORM synchro.notify_changes(NULL);
END
$$;
