-- synchro.accept_rewrite: the schema owner's way on after ALTER COLUMN ... TYPE
-- ... USING rewrote a registered column of registered relation rel (or of one
-- of its partitions) in place and kept its type, or ALTER TYPE ... RENAME VALUE
-- renamed a value of an enum type a registered column holds (also one rows
-- were captured with before anything recorded it), which synchro.catalog_drift
-- reports and which blocks capture: either changed values without row
-- events, so the projections and clients may hold the old ones. Write every
-- changed row again first (UPDATE ... SET id = id captures it whole), or accept
-- stale values until the rows are next written; then this records the storage
-- and registered columns (synchro.record_storage) of rel and its recorded
-- partitions, and the labels of its enum values (forgetting labels its types
-- no longer have: synchro.record_enum_labels), as they are now, so that the
-- catalog check stops blocking capture, and returns how many tables' records
-- it changed. Synchro cannot verify the attestation. It
-- refuses (42704) a relation that is not registered.
CREATE OR REPLACE FUNCTION synchro.accept_rewrite(rel regclass)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid bigint := synchro.registered_relation(rel);
    tables integer;
BEGIN
    tables := synchro.record_storage(rid, true);
    PERFORM synchro.record_enum_labels(rid, true);
    RAISE WARNING 'synchro: recorded the storage and enum labels of % (% tables changed): rows a rewrite or a renamed enum value changed keep their old values with clients until they are written again', rel, tables;
    RETURN tables;
END
$$;
