-- synchro.install_capture: installs the key guard, fence and truncate guard
-- triggers of registered relation rid (the truncate guard on each partition too:
-- synchro.guard_partitions), the key guard and fence running the relation's
-- generated functions (synchro.install_capture_functions), all firing in
-- every session (ENABLE ALWAYS: also
-- in a logical replication subscription's apply worker, which writes with
-- session_replication_role = replica, so that rows a subscription writes are
-- fenced and captured like any others), and adds it to the capture publication by
-- qualified name. The generated fence has the immutable registered identity
-- (relation_id, kind, schema, name, OID, key column, table_id) compiled in, so
-- it never looks the registry up and always reports the identity that was
-- registered; the trigger's arguments repeat it (and the key guard's its key
-- column), for readiness to compare with the registry.
CREATE OR REPLACE FUNCTION synchro.install_capture(rid bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    qname text;
    pub name;
BEGIN
    SELECT rr.*, t.table_id, c.relkind INTO r
    FROM synchro.relation rr
    LEFT JOIN synchro.synced_table t ON t.relation_id = rr.relation_id
    JOIN pg_class c ON c.oid = rr.relation_oid
    WHERE rr.relation_id = rid;
    qname := synchro.qualified_name(r.relation_oid);
    PERFORM synchro.install_capture_functions(rid);
    EXECUTE format('CREATE TRIGGER synchro_key_guard BEFORE UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION synchro_capture.%I(%L, %L)',
                   qname, 'key_guard_' || rid, r.key_column, CASE WHEN r.relkind = 'p' THEN 'partitioned' ELSE '' END);
    EXECUTE format('CREATE TRIGGER synchro_fence AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW '
                   'EXECUTE FUNCTION synchro_capture.%I(%L, %L, %L, %L, %L, %L, %L)',
                   qname, 'fence_' || rid, r.relation_id, r.registration_kind, r.schema_name, r.relation_name, r.relation_oid,
                   r.key_column, coalesce(r.table_id::text, ''));
    EXECUTE format('CREATE TRIGGER synchro_truncate_guard BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION synchro.truncate_guard()',
                   qname);
    -- Also in sessions with session_replication_role = replica (a subscription's
    -- apply worker, a restore), where ordinary triggers do not fire. Partitions'
    -- clones of the row triggers fire as their parent's do.
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER synchro_key_guard, ENABLE ALWAYS TRIGGER synchro_fence, '
                   'ENABLE ALWAYS TRIGGER synchro_truncate_guard', qname);
    PERFORM synchro.guard_partitions(rid);

    SELECT publication_name INTO pub FROM synchro.settings;
    IF NOT EXISTS (SELECT FROM pg_publication p JOIN pg_publication_rel pr ON pr.prpubid = p.oid
                   WHERE p.pubname = pub AND pr.prrelid = r.relation_oid) THEN
        EXECUTE format('ALTER PUBLICATION %I ADD TABLE %s', pub, qname);
    END IF;
END
$$;
