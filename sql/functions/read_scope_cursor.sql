-- synchro.read_scope_cursor: the position a scope cursor encodes, or NULL when it
-- cannot be resumed: NULL, malformed, bad signature, another scope, another stream
-- generation, or past the materialized high-watermark hw (a cursor this stream
-- never issued).
CREATE OR REPLACE FUNCTION synchro.read_scope_cursor(cursor text, gen uuid, scope text, hw pg_lsn,
                                                    OUT lsn pg_lsn, OUT event_ordinal integer, OUT effect_ordinal integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts text[] := synchro.read_token('c', cursor);
BEGIN
    IF parts IS NULL OR cardinality(parts) <> 5 OR parts[1] IS DISTINCT FROM gen::text OR parts[2] IS DISTINCT FROM scope
       OR parts[3]::pg_lsn > hw THEN
        RETURN;
    END IF;
    lsn := parts[3]::pg_lsn;
    event_ordinal := parts[4]::integer;
    effect_ordinal := parts[5]::integer;
END
$$;
