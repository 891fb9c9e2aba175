-- synchro.qualified_name: the schema-qualified, quoted name of a relation, for
-- messages and generated SQL. Never depends on search_path.
CREATE OR REPLACE FUNCTION synchro.qualified_name(rel oid)
RETURNS text
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('%I.%I', n.nspname, c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = rel
$$;
