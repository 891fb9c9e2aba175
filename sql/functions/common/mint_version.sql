-- synchro.mint_version: a new opaque row version for a row no fence gave one
-- (a row a projection bootstrap stages that was written before its relation
-- was registered, a reconfigured row whose wire image changed): unique, and
-- spelled like a fence's (32 hex digits), time ordered so that many minted at
-- once are appended to synchro.row_version's primary key. Schema-qualified and
-- without a SET clause, so that a statement minting one per row inlines it
-- (a SET clause costs a configuration change per call: 100 µs a row here).
CREATE OR REPLACE FUNCTION synchro.mint_version()
RETURNS text
LANGUAGE sql VOLATILE
AS $$
    SELECT pg_catalog.encode(pg_catalog.overlay(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()),
               pg_catalog.substr(pg_catalog.int8send(pg_catalog.floor(
                   pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000)::bigint), 3), 1, 6), 'hex')
$$;
