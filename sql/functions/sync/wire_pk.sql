-- synchro.wire_pk: the wire primary key object of a synced row, e.g. {"id": 42}
-- ({"id": "d_1"} for a string key): the registered key column with the key typed
-- as a JSON number for int/int64 keys.
CREATE OR REPLACE FUNCTION synchro.wire_pk(key_column name, key_type text, key text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(key_column, CASE WHEN key_type = 'string' THEN to_jsonb(key) ELSE to_jsonb(key::numeric) END)
$$;
