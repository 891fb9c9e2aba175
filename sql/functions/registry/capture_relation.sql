-- synchro.capture_relation: records a validated relation in the registry under
-- generation g, with the type and attribute number of each registered column
-- (the worker and readiness treat a change of either as relation drift), its
-- storage and registered columns (synchro.record_storage: a rewrite of a
-- registered column is catalog drift) and the labels of its columns' enum types (synchro.record_enum_labels), and
-- returns its immutable relation_id. The relation must not be registered yet,
-- and the database must be UTF8 (0A000 otherwise). It locks the relation
-- against writers until the registering transaction commits, so that rows it
-- already holds are exactly those the registration's bootstrap stages
-- (synchro.begin_bootstrap). synchro.install_capture then installs its triggers
-- (after a synced table's synced_table row exists, whose table_id the fence carries).
CREATE OR REPLACE FUNCTION synchro.capture_relation(rel oid, kind text, cols name[], g bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ident record := synchro.capture_identity(rel);
    qname text := synchro.qualified_name(rel);
    rid bigint;
    enc name := (SELECT pg_encoding_to_char(d.encoding) FROM pg_database d WHERE d.datname = current_database());
BEGIN
    -- pgoutput sends text in the database's encoding and captured values travel
    -- as JSON: any other encoding lets a write commit that capture cannot carry.
    IF enc <> 'UTF8' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: capture needs a UTF8 database, this one is %', qname, enc
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF EXISTS (SELECT FROM synchro.relation r JOIN pg_namespace n ON n.nspname = r.schema_name
               JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.relation_name
               WHERE c.oid = rel) THEN
        RAISE EXCEPTION 'synchro: relation % rejected: a relation with this qualified name was registered under another OID (dropped and recreated); this is relation drift and needs a controlled reconfiguration', qname
            USING ERRCODE = 'object_in_use';
    END IF;
    -- The lock the fence triggers take anyway, taken first: a writer that has
    -- not committed yet is waited for, and its rows are seen. A partitioned
    -- table's rows are its partitions' (capture_identity refuses inheritance).
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', rel::regclass);
    INSERT INTO synchro.relation (registration_kind, schema_name, relation_name, relation_oid,
                                  key_column, key_type, columns, column_types, column_attnums, generation)
    SELECT kind, n.nspname, c.relname, c.oid, ident.key_column, ident.key_type,
           array_agg(a.attname ORDER BY a.attname), array_agg(a.atttypid ORDER BY a.attname),
           array_agg(a.attnum ORDER BY a.attname), g
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                       AND a.attname IN (SELECT unnest(cols || ident.key_column))
    WHERE c.oid = rel
    GROUP BY n.nspname, c.relname, c.oid
    RETURNING relation_id INTO rid;
    PERFORM synchro.record_storage(rid);
    PERFORM synchro.record_enum_labels(rid);

    RETURN rid;
END
$$;
