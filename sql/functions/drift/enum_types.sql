-- synchro.enum_types: the enum types whose values a value of type typ can hold:
-- typ itself when it is an enum, and those reached through a domain's base
-- type, an array's element type, a range's (or multirange's) subtype and a
-- composite type's attributes, at any depth. ALTER TYPE ... RENAME VALUE of any
-- of them changes the text of such a value without a row event
-- (synchro.record_enum_labels records their labels). The types PostgreSQL
-- defines itself (OIDs below FirstNormalObjectId, 16384) are built on no
-- enum, so they are answered without a lookup.
CREATE OR REPLACE FUNCTION synchro.enum_types(typ oid)
RETURNS SETOF oid
LANGUAGE plpgsql STABLE STRICT
ROWS 1
SET search_path = pg_catalog, pg_temp
-- PL/pgSQL keeps the query's plan for the session: the worker asks at each
-- catalog check.
AS $$
BEGIN
    IF typ < 16384 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH RECURSIVE reached(t) AS (
        SELECT typ
        UNION
        SELECT x.t
        FROM reached r
        JOIN pg_type p ON p.oid = r.t
        CROSS JOIN LATERAL (SELECT nullif(p.typbasetype, 0)
                            UNION ALL SELECT nullif(p.typelem, 0)
                            UNION ALL SELECT g.rngsubtype FROM pg_range g WHERE g.rngtypid = p.oid
                            UNION ALL SELECT g.rngtypid FROM pg_range g WHERE g.rngmultitypid = p.oid
                            UNION ALL SELECT a.atttypid FROM pg_attribute a
                                      WHERE a.attrelid = p.typrelid AND p.typtype = 'c' AND a.attnum > 0 AND NOT a.attisdropped) x(t)
        WHERE x.t >= 16384
    )
    SELECT r.t FROM reached r JOIN pg_type p ON p.oid = r.t WHERE p.typtype = 'e';
END
$$;
