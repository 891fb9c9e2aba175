-- synchro.wire_pk: the wire primary key object of a synced row, e.g. {"id": 42}
-- ({"id": "d_1"} for a string key): the registered key column with the key typed
-- as a JSON number for int/int64 keys. It has no SET clause and names every
-- function and operator with its schema, so the planner inlines it into the
-- page queries that call it once a row, whatever search_path the caller has.
CREATE OR REPLACE FUNCTION synchro.wire_pk(key_column name, key_type text, key text)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.jsonb_build_object(key_column,
               CASE WHEN key_type OPERATOR(pg_catalog.=) 'string' THEN pg_catalog.to_jsonb(key)
                    ELSE pg_catalog.to_jsonb(key::pg_catalog.numeric) END)
$$;
