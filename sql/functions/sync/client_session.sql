-- synchro.client_session: the client of a sync request, bound to user_id, with
-- its scope set refreshed from the live assignment (scope_set_version moves
-- forward exactly when the set changes). scope_epoch maps every scope of the set
-- to the epoch at which it was last added (a fresh synchro.scope_epoch_seq value;
-- a scope kept keeps its epoch, a removed one loses it), which binds the client's
-- cursors (synchro.read_scope_token): assignment is observed only here, at
-- requests, so a removal and re-assignment between two requests of the client
-- is not seen. connect = true registers an unknown client for the user;
-- otherwise an unknown client is refused. A client_id bound to another user is
-- refused (409 client_conflict). A schema hash in the request
-- that is not the current one is refused (422 schema_mismatch) unless connecting.
-- Its requests keep the client from retirement (synchro.prune_clients).
CREATE OR REPLACE FUNCTION synchro.client_session(user_id text, request jsonb, connect boolean)
RETURNS synchro.client
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cid text := request ->> 'client_id';
    assigned text[] := synchro.assigned_scopes(user_id);
    c synchro.client;
BEGIN
    IF NOT connect AND request -> 'schema' ->> 'hash' IS NOT NULL
       AND request -> 'schema' ->> 'hash' IS DISTINCT FROM
           (SELECT v.hash FROM synchro.schema_version v ORDER BY v.version DESC LIMIT 1) THEN
        PERFORM synchro.refuse(422, 'schema_mismatch', 'the client schema is not the current schema; connect again');
    END IF;
    SELECT * INTO c FROM synchro.client WHERE client_id = cid;
    IF NOT FOUND AND connect THEN
        INSERT INTO synchro.client (client_id, user_id, scope_set, scope_set_version, scope_epoch)
        VALUES (cid, user_id, assigned, 1,
                (SELECT coalesce(jsonb_object_agg(s, e.v), '{}')
                 FROM (SELECT nextval('synchro.scope_epoch_seq') AS v) e, unnest(assigned) s))
        ON CONFLICT (client_id) DO NOTHING
        RETURNING * INTO c;
        IF NOT FOUND THEN -- registered concurrently
            SELECT * INTO c FROM synchro.client WHERE client_id = cid;
        END IF;
    END IF;
    IF c.client_id IS NULL THEN
        PERFORM synchro.refuse(409, 'client_conflict', 'client_id is not connected; call /sync/connect first');
    END IF;
    IF c.user_id IS DISTINCT FROM user_id THEN
        PERFORM synchro.refuse(409, 'client_conflict', 'client_id is registered to another user');
    END IF;
    -- last_seen_at, by which synchro.prune_clients retires idle clients, moves
    -- at most hourly (one write per client and hour, not per request); a
    -- client retired meanwhile is not connected.
    IF c.last_seen_at < now() - interval '1 hour' THEN
        UPDATE synchro.client k SET last_seen_at = now() WHERE k.client_id = cid RETURNING * INTO c;
        IF NOT FOUND THEN
            PERFORM synchro.refuse(409, 'client_conflict', 'client_id is not connected; call /sync/connect first');
        END IF;
    END IF;
    IF c.scope_set IS DISTINCT FROM assigned THEN
        UPDATE synchro.client k
        SET scope_set = assigned, scope_set_version = k.scope_set_version + 1,
            scope_epoch = (SELECT coalesce(jsonb_object_agg(s, coalesce(k.scope_epoch -> s, to_jsonb(e.v))), '{}')
                           FROM (SELECT nextval('synchro.scope_epoch_seq') AS v) e, unnest(assigned) s)
        WHERE k.client_id = cid AND k.scope_set IS DISTINCT FROM assigned;
        SELECT * INTO c FROM synchro.client WHERE client_id = cid;
    END IF;
    RETURN c;
END
$$;
