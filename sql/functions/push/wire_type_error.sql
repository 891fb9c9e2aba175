-- synchro.wire_type_error: the client-safe message naming the first column (by
-- name) of cols (a push mutation's columns, relation rel) whose JSON value does
-- not have the wire form of the column's portable type, or NULL when all do. It
-- guarantees that push takes back exactly what pull emits (internal/wire) and
-- nothing PostgreSQL would coerce: string types a JSON string; int and int64 a
-- JSON number (fractions and overflow are the casts' to refuse); float a JSON
-- number or "NaN", "Infinity", "-Infinity"; boolean a JSON boolean; datetime,
-- date and time a JSON string without PostgreSQL's special input words (now,
-- today, tomorrow, yesterday, epoch, allballs: never emitted by pull, and now,
-- today, tomorrow, yesterday depend on the moment; infinity and -infinity stay
-- accepted); json any JSON; bytes a JSON string (its base64 is decoded by the
-- caller). JSON null is accepted for every type (NOT NULL answers as its
-- constraint). A column missing from the relation or of no portable type is left
-- to the write (drift). One query over the columns; never quotes a value.
CREATE OR REPLACE FUNCTION synchro.wire_type_error(rel oid, cols jsonb)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('column "%s" must be %s', e.key, x.wanted)
    FROM jsonb_each(cols) e
    JOIN pg_attribute a ON a.attrelid = rel AND a.attname = e.key AND a.attnum > 0 AND NOT a.attisdropped
    -- OFFSET 0 keeps this subquery whole: flattened, each reference to portable
    -- below would call synchro.portable_type again (a dozen calls per column).
    CROSS JOIN LATERAL (SELECT synchro.portable_type(a.atttypid::regtype) AS portable, jsonb_typeof(e.value) AS given
                        OFFSET 0) v
    CROSS JOIN LATERAL (SELECT CASE
        WHEN v.given = 'null' OR v.portable IS NULL OR v.portable = 'json' THEN NULL
        WHEN v.portable = 'string' AND v.given <> 'string' THEN 'a JSON string'
        WHEN v.portable IN ('int', 'int64') AND v.given <> 'number' THEN 'a JSON number'
        WHEN v.portable = 'float' AND v.given <> 'number'
             AND (v.given <> 'string' OR (e.value #>> '{}') NOT IN ('NaN', 'Infinity', '-Infinity'))
            THEN 'a JSON number or one of the strings "NaN", "Infinity", "-Infinity"'
        WHEN v.portable = 'boolean' AND v.given <> 'boolean' THEN 'a JSON boolean'
        WHEN v.portable IN ('datetime', 'date', 'time') AND v.given <> 'string' THEN 'a JSON string'
        -- PostgreSQL's date/time parser splits its input into runs of letters.
        WHEN v.portable IN ('datetime', 'date', 'time')
             AND (e.value #>> '{}') ~* '(^|[^a-z])(now|today|tomorrow|yesterday|epoch|allballs)([^a-z]|$)'
            THEN format('an explicit %s, not a special input word', v.portable)
        WHEN v.portable = 'bytes' AND v.given <> 'string' THEN 'a base64 JSON string'
    END AS wanted) x
    WHERE x.wanted IS NOT NULL
    ORDER BY e.key
    LIMIT 1
$$;
