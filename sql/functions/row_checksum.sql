-- synchro.row_checksum: the unsigned 32-bit checksum of one delivered row state
-- (table, key and wire image). Clients sum the checksums they hold to verify a
-- scope checksum, so no client-side canonical serialization is needed.
CREATE OR REPLACE FUNCTION synchro.row_checksum(table_id integer, key text, image jsonb)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog
AS $$
    SELECT ('x' || left(md5(table_id::text || '/' || key || '/' || coalesce(image::text, '')), 8))::bit(32)::bigint
$$;
