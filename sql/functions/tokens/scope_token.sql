-- synchro.scope_token: a signed token of kind (scope cursor "c", rebuild session
-- "r") for scope, bound to stream generation gen, to client c and to the epoch at
-- which scope was last added to c's scope set: the parts
-- [gen, scope, client_id, epoch] followed by parts. synchro.read_scope_token is
-- the one place that checks the binding. Raises when scope is not assigned to c
-- (a caller bug: entry points only sign assigned scopes).
CREATE OR REPLACE FUNCTION synchro.scope_token(kind text, gen uuid, c synchro.client, scope text, parts text[])
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    epoch text := c.scope_epoch ->> scope;
BEGIN
    IF epoch IS NULL OR c.client_id IS NULL OR gen IS NULL THEN
        RAISE EXCEPTION 'synchro: no token for scope % of client %: not assigned', scope, c.client_id;
    END IF;
    RETURN synchro.sign_token(kind, ARRAY[gen::text, scope, c.client_id, epoch] || parts);
END
$$;
