-- synchro.capture_relation: records a validated relation in the registry under
-- generation g, installs its key guard, fence and truncate guard triggers, and adds
-- it to the capture publication by qualified name. Returns the immutable
-- relation_id. The relation must not be registered yet.
CREATE OR REPLACE FUNCTION synchro.capture_relation(rel oid, kind text, cols name[], g bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    ident record := synchro.capture_identity(rel);
    qname text := synchro.qualified_name(rel);
    rid bigint;
    pub name;
BEGIN
    IF EXISTS (SELECT FROM synchro.relation r JOIN pg_namespace n ON n.nspname = r.schema_name
               JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.relation_name
               WHERE c.oid = rel) THEN
        RAISE EXCEPTION 'synchro: relation % rejected: a relation with this qualified name was registered under another OID (dropped and recreated); this is relation drift and needs a controlled reconfiguration', qname
            USING ERRCODE = 'object_in_use';
    END IF;
    INSERT INTO synchro.relation (registration_kind, schema_name, relation_name, relation_oid,
                                  key_column, key_type, columns, generation)
    SELECT kind, n.nspname, c.relname, c.oid, ident.key_column, ident.key_type,
           ARRAY(SELECT DISTINCT x FROM unnest(cols || ident.key_column) x ORDER BY 1), g
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = rel
    RETURNING relation_id INTO rid;

    EXECUTE format('CREATE TRIGGER synchro_key_guard BEFORE UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION synchro.key_guard(%L)',
                   qname, ident.key_column);
    EXECUTE format('CREATE TRIGGER synchro_fence AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION synchro.fence(%s)',
                   qname, rid);
    EXECUTE format('CREATE TRIGGER synchro_truncate_guard BEFORE TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION synchro.truncate_guard()',
                   qname);

    SELECT publication_name INTO pub FROM synchro.settings;
    IF NOT EXISTS (SELECT FROM pg_publication p JOIN pg_publication_rel pr ON pr.prpubid = p.oid
                   WHERE p.pubname = pub AND pr.prrelid = rel) THEN
        EXECUTE format('ALTER PUBLICATION %I ADD TABLE %s', pub, qname);
    END IF;
    RETURN rid;
END
$$;
