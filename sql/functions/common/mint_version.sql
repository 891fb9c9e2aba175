-- synchro.mint_version: a new opaque row version for a row no fence gave one
-- (a row a projection bootstrap stages that was written before its relation
-- was registered): unique, and spelled like a fence's (32 hex digits), time
-- ordered so that many minted at once are appended to synchro.row_version's
-- primary key.
CREATE OR REPLACE FUNCTION synchro.mint_version()
RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT encode(overlay(uuid_send(gen_random_uuid())
                  PLACING substring(int8send(floor(date_part('epoch', clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 'hex')
$$;
