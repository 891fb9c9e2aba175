-- synchro.registered_relation: the relation_id of registered relation rel, for
-- the owner's attestation functions (synchro.accept_rewrite,
-- synchro.accept_partition_guards); refuses (42704) a relation that is not
-- registered, so that an attestation never silently records nothing.
CREATE OR REPLACE FUNCTION synchro.registered_relation(rel regclass)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rid bigint;
BEGIN
    SELECT r.relation_id INTO rid FROM synchro.relation r WHERE r.relation_oid = rel;
    IF rid IS NULL THEN
        RAISE EXCEPTION 'synchro: % is not a registered relation', rel
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN rid;
END
$$;
