-- synchro.notify_changes: tells every synchrod process listening on channel
-- synchro_changes (its waiting pulls, docs/protocol.md "Live pull") that the
-- calling transaction changes what pulls of scopes serve. The payload names the
-- scopes, one a line, or is '*' (every scope: more than a notification holds,
-- or a change of the whole stream when scopes is NULL). PostgreSQL delivers it
-- when the transaction commits, in commit order, and never when it rolls back,
-- so a woken pull always finds the change committed. Nothing is sent for no
-- scope.
CREATE OR REPLACE FUNCTION synchro.notify_changes(scopes text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    payload text := coalesce(array_to_string(scopes, E'\n'), '*');
BEGIN
    IF cardinality(scopes) = 0 THEN
        RETURN;
    END IF;
    IF octet_length(payload) > 7000 THEN
        payload := '*';
    END IF;
    PERFORM pg_notify('synchro_changes', payload);
END
$$;
