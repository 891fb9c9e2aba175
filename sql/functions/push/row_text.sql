-- synchro.row_text: the synced columns of the live row of table t with the given
-- key as [[column, type oid, text or null], ...] in registration order (the text
-- output of each value, as capture decodes it, under the caller's DateStyle ISO /
-- TimeZone UTC; a json value as jsonb writes it), or NULL
-- when there is no such row. The HTTP layer renders it with the same typed JSON
-- rules as captured row images, so a push's server_row equals what pull delivers.
CREATE OR REPLACE FUNCTION synchro.row_text(t synchro.synced_table, key text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.relation;
    key_type text;
    cols text;
    vals text[];
BEGIN
    SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = t.relation_id;
    SELECT format_type(a.atttypid, NULL) INTO STRICT key_type
    FROM pg_attribute a WHERE a.attrelid = r.relation_oid AND a.attname = r.key_column;
    -- The type's output function, as pgoutput sends it (format's %s), not a
    -- cast to text: boolean casts to true/false, character(n) loses its padding.
    -- A json value as jsonb writes it, as capture's jsonb images hold it (one
    -- member per name, numbers as numeric writes them: no -0).
    SELECT string_agg(format('CASE WHEN x.%1$I IS NOT NULL THEN format(''%%s'', x.%1$I%2$s) END', u.c,
                             CASE WHEN a.atttypid = 'json'::regtype THEN '::jsonb' ELSE '' END), ', ' ORDER BY u.o)
    INTO cols FROM unnest(t.sync_columns) WITH ORDINALITY AS u(c, o)
    JOIN pg_attribute a ON a.attrelid = r.relation_oid AND a.attname = u.c;
    -- ONLY: rows of inheritance children are not the synced table's.
    EXECUTE format('SELECT ARRAY[%s] FROM %s%I.%I x WHERE x.%I = $1::%s', cols,
                   (SELECT CASE WHEN c.relkind = 'r' THEN 'ONLY ' ELSE '' END FROM pg_class c WHERE c.oid = r.relation_oid),
                   r.schema_name, r.relation_name, r.key_column, key_type)
        INTO vals USING key;
    IF vals IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT jsonb_agg(jsonb_build_array(u.c, a.atttypid::bigint, vals[u.o]) ORDER BY u.o)
            FROM unnest(t.sync_columns) WITH ORDINALITY AS u(c, o)
            JOIN pg_attribute a ON a.attrelid = r.relation_oid AND a.attname = u.c);
END
$$;
