-- synchro.register_shared_scope: registers (or updates the portable flag of) a
-- shared scope, which the default scope assignment gives every user. A portable
-- scope holds the same rows for every user.
CREATE OR REPLACE FUNCTION synchro.register_shared_scope(scope text, portable boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF scope IS NULL OR scope = '' OR length(scope) > 256 OR scope ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'synchro: shared scope rejected: a scope id is 1 to 256 characters without control characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO synchro.shared_scope AS s (scope, portable) VALUES (scope, coalesce(portable, false))
    ON CONFLICT ON CONSTRAINT shared_scope_pkey DO UPDATE SET portable = EXCLUDED.portable;
    -- Waiting pulls answer again: every client's scope set may have grown.
    PERFORM synchro.notify_changes(NULL);
END
$$;
