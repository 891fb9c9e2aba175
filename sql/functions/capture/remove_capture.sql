-- synchro.remove_capture: removes what synchro.install_capture installed for
-- registered relation rid: its key guard, fence and truncate guard triggers,
-- its partitions' statement guards, its generated key guard and fence
-- functions (synchro.install_capture_functions), and its membership of the
-- capture publication. From the caller's commit on, writes to it are neither fenced
-- nor decoded. Unregistration (and a reconfiguration, which installs the
-- triggers again with the relation's current identity) calls it.
CREATE OR REPLACE FUNCTION synchro.remove_capture(rid bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.relation;
    part record;
    pub name := (SELECT s.publication_name FROM synchro.settings s);
BEGIN
    SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
    FOR part IN SELECT tg.tgname, tg.tgrelid FROM pg_trigger tg
                WHERE tg.tgname IN ('synchro_key_guard', 'synchro_fence', 'synchro_truncate_guard', 'synchro_partition_guard')
                  AND NOT tg.tgisinternal
                  AND (tg.tgrelid = r.relation_oid
                       OR tg.tgrelid IN (SELECT rp.partition_oid FROM synchro.relation_partition rp WHERE rp.relation_id = rid))
                  AND tg.tgparentid = 0
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', part.tgname, synchro.qualified_name(part.tgrelid));
    END LOOP;
    -- Refused (2BP01) while any other trigger still runs one of them.
    EXECUTE format('DROP FUNCTION IF EXISTS synchro_capture.%I(), synchro_capture.%I()', 'fence_' || rid, 'key_guard_' || rid);
    IF EXISTS (SELECT FROM pg_publication p JOIN pg_publication_rel pr ON pr.prpubid = p.oid
               WHERE p.pubname = pub AND pr.prrelid = r.relation_oid) THEN
        EXECUTE format('ALTER PUBLICATION %I DROP TABLE %s', pub, synchro.qualified_name(r.relation_oid));
    END IF;
END
$$;
