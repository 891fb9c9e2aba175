-- synchro.read_scope_token: the parts after the binding of a token made by
-- synchro.scope_token, or NULL unless it verifies for kind and is bound to
-- exactly this stream generation gen, this scope, this client c and the epoch at
-- which scope was last added to c's scope set. So a token only resumes for the
-- client it was issued to, while the scope has stayed assigned to that client
-- since it was issued: a scope removed from the set and assigned again has a new
-- epoch, another client (or user) has another client_id, and tokens issued before
-- the binding existed (migration 00015) have another shape. Never raises on
-- client input.
CREATE OR REPLACE FUNCTION synchro.read_scope_token(kind text, token text, gen uuid, c synchro.client, scope text)
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts text[] := synchro.read_token(kind, token);
    epoch text := c.scope_epoch ->> scope;
BEGIN
    IF parts IS NULL OR epoch IS NULL OR gen IS NULL OR c.client_id IS NULL OR cardinality(parts) < 4
       OR parts[1:4] IS DISTINCT FROM ARRAY[gen::text, scope, c.client_id, epoch] THEN
        RETURN NULL;
    END IF;
    RETURN parts[5:];
END
$$;
