-- synchro.scope_checksum: the scope checksum (sum of row checksums mod 2^32, as a
-- decimal string) of a scope at transaction_end(lsn): the latest digest recorded
-- at or before lsn, "0" for a scope no materialized transaction has changed.
CREATE OR REPLACE FUNCTION synchro.scope_checksum(gen uuid, scope text, lsn pg_lsn)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT d.digest FROM synchro.scope_digest d
                     WHERE d.stream_generation = gen AND d.scope = scope_checksum.scope AND d.commit_lsn <= lsn
                     ORDER BY d.commit_lsn DESC LIMIT 1), 0)::text
$$;
