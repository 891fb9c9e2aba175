-- synchro.capture_relation: records a validated relation in the registry under
-- generation g and returns its immutable relation_id. The relation must not be
-- registered yet. synchro.install_capture then installs its triggers (after a
-- synced table's synced_table row exists, whose table_id the fence carries).
CREATE OR REPLACE FUNCTION synchro.capture_relation(rel oid, kind text, cols name[], g bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
DECLARE
    ident record := synchro.capture_identity(rel);
    qname text := synchro.qualified_name(rel);
    rid bigint;
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

    RETURN rid;
END
$$;
