-- synchro.ensure_publication: makes pub the capture publication: creates it when
-- missing (row changes and truncates, partitions published as their root) and
-- records its name for registration. Existing registered relations are added.
CREATE OR REPLACE FUNCTION synchro.ensure_publication(pub name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = pub) THEN
        EXECUTE format('CREATE PUBLICATION %I WITH (publish = %L, publish_via_partition_root = true)',
                       pub, 'insert, update, delete, truncate');
    END IF;
    UPDATE synchro.settings SET publication_name = pub WHERE publication_name IS DISTINCT FROM pub;
    FOR r IN SELECT relation_oid FROM synchro.relation rr
             WHERE NOT EXISTS (SELECT FROM pg_publication p JOIN pg_publication_rel pr ON pr.prpubid = p.oid
                               WHERE p.pubname = pub AND pr.prrelid = rr.relation_oid) LOOP
        EXECUTE format('ALTER PUBLICATION %I ADD TABLE %s', pub, synchro.qualified_name(r.relation_oid));
    END LOOP;
END
$$;
