-- synchro.row_checksum: the unsigned 32-bit checksum of one delivered row state
-- (table, key and wire image). Clients sum the checksums they hold to verify a
-- scope checksum, so no client-side canonical serialization is needed.
-- No SET clause, and every name is schema-qualified, so that the planner inlines
-- it into the statements that checksum many rows at once.
CREATE OR REPLACE FUNCTION synchro.row_checksum(table_id integer, key text, image jsonb)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT ('x' OPERATOR(pg_catalog.||) pg_catalog.left(pg_catalog.md5(
                table_id::text OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) key OPERATOR(pg_catalog.||) '/'
                OPERATOR(pg_catalog.||) coalesce(image::text, '')), 8))::bit(32)::bigint
$$;
