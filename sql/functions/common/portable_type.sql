-- synchro.portable_type: the protocol's portable type for a PostgreSQL type, or
-- NULL when the type has no portable representation. Key types are the subset
-- string/int/int64 checked by synchro.capture_identity.
-- PL/pgSQL, not SQL: push validates every column through it (wire_type_error),
-- and a SQL function that cannot be inlined (this one reads pg_type) is parsed
-- and planned again in each execution of the query calling it, about 0.13 ms
-- here; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION synchro.portable_type(t regtype)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE
        WHEN t IN ('text'::regtype, 'character varying'::regtype, 'character'::regtype,
                   'uuid'::regtype, 'name'::regtype) THEN 'string'
        WHEN t IN ('smallint'::regtype, 'integer'::regtype) THEN 'int'
        WHEN t = 'bigint'::regtype THEN 'int64'
        WHEN t IN ('real'::regtype, 'double precision'::regtype, 'numeric'::regtype) THEN 'float'
        WHEN t = 'boolean'::regtype THEN 'boolean'
        WHEN t IN ('timestamp with time zone'::regtype, 'timestamp without time zone'::regtype) THEN 'datetime'
        WHEN t = 'date'::regtype THEN 'date'
        WHEN t IN ('time without time zone'::regtype, 'time with time zone'::regtype) THEN 'time'
        WHEN t IN ('json'::regtype, 'jsonb'::regtype) THEN 'json'
        WHEN t = 'bytea'::regtype THEN 'bytes'
        WHEN (SELECT typtype FROM pg_type WHERE oid = t) = 'e' THEN 'string'
    END;
END
$$;
