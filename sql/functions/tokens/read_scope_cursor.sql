-- synchro.read_scope_cursor: the position a scope cursor encodes, or NULL when it
-- cannot be resumed by client c (whose scope set is current): NULL, malformed,
-- bad signature, another scope, another stream generation, another client, a
-- scope not assigned to c or assigned to it again since the cursor was issued
-- (synchro.read_scope_token), past the materialized high-watermark hw (a
-- cursor this stream never issued), before the scope's floor (a bootstrap
-- added rows to the scope there, synchro.scope_floor), or before
-- transaction_end(horizon), the generation's retention horizon
-- (synchro.history_horizon_lsn): the history after such a cursor may be gone.
DROP FUNCTION IF EXISTS synchro.read_scope_cursor(text, uuid, text, pg_lsn);
DROP FUNCTION IF EXISTS synchro.read_scope_cursor(text, uuid, synchro.client, text, pg_lsn);
CREATE OR REPLACE FUNCTION synchro.read_scope_cursor(cursor text, gen uuid, c synchro.client, scope text, hw pg_lsn, horizon pg_lsn,
                                                    OUT lsn pg_lsn, OUT event_ordinal integer, OUT effect_ordinal integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts text[] := synchro.read_scope_token('c', cursor, gen, c, scope);
BEGIN
    IF parts IS NULL OR cardinality(parts) <> 3 OR parts[1]::pg_lsn > hw
       OR (parts[1]::pg_lsn, parts[2]::integer, parts[3]::integer) < (horizon, 2147483647, 2147483647)
       OR parts[1]::pg_lsn < (SELECT f.floor_lsn FROM synchro.scope_floor f WHERE f.stream_generation = gen AND f.scope = read_scope_cursor.scope) THEN
        RETURN;
    END IF;
    lsn := parts[1]::pg_lsn;
    event_ordinal := parts[2]::integer;
    effect_ordinal := parts[3]::integer;
END
$$;
