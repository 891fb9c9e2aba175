-- synchro.capture_identity: validates that a relation can be captured and returns
-- its single key column and portable key type. Rejects, naming the relation and
-- the rule broken: anything but a permanent logged table (a partitioned table's
-- partitions too); a table of Synchro's own schema; a table with inheritance
-- children (publishing it publishes them, unfenced); no, composite or
-- deferrable primary key; a generated key column (logical decoding leaves it
-- out); a key type other than string (text, varchar, uuid), int (smallint,
-- integer) or int64 (bigint); a replica identity other than DEFAULT on the
-- table or any of its partitions (docs/change-stream.md, "TRUNCATE and replica identity").
CREATE OR REPLACE FUNCTION synchro.capture_identity(rel oid, OUT key_column name, OUT key_type text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c pg_class;
    qname text := synchro.qualified_name(rel);
    pk pg_constraint;
    pk_count int;
    key_typ regtype;
    key_generated boolean;
    bad_relation text;
BEGIN
    SELECT * INTO c FROM pg_class WHERE oid = rel;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: relation with OID % does not exist', rel USING ERRCODE = 'undefined_table';
    END IF;
    IF c.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'synchro: relation % rejected: only tables can be registered (this is a %)', qname,
            CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                           WHEN 'f' THEN 'foreign table' ELSE 'relkind ' || c.relkind::text END
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    IF c.relispartition THEN
        RAISE EXCEPTION 'synchro: relation % rejected: it is a partition; register its partitioned root table', qname
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    IF c.relpersistence <> 'p' THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % tables are not written to WAL and cannot be captured', qname,
            CASE c.relpersistence WHEN 'u' THEN 'unlogged' ELSE 'temporary' END
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    SELECT synchro.qualified_name(pc.oid) INTO bad_relation
    FROM pg_partition_tree(rel) t JOIN pg_class pc ON pc.oid = t.relid
    WHERE pc.relpersistence <> 'p'
    ORDER BY pc.oid
    LIMIT 1;
    IF bad_relation IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: relation % rejected: its partition % is unlogged: its rows are not written to WAL and cannot be captured',
            qname, bad_relation
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    IF c.relnamespace = 'synchro'::regnamespace THEN
        RAISE EXCEPTION 'synchro: relation % rejected: it belongs to Synchro''s own schema', qname
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    SELECT synchro.qualified_name(i.inhrelid) INTO bad_relation
    FROM pg_inherits i WHERE i.inhparent = rel AND c.relkind = 'r'
    ORDER BY i.inhrelid
    LIMIT 1;
    IF bad_relation IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % inherits from it; a table with inheritance children cannot be captured (their rows are read through it without fences)',
            qname, bad_relation
            USING ERRCODE = 'invalid_table_definition';
    END IF;

    SELECT count(*) INTO pk_count FROM pg_constraint WHERE conrelid = rel AND contype = 'p';
    IF pk_count = 0 THEN
        RAISE EXCEPTION 'synchro: relation % rejected: it has no primary key; exactly one primary-key column is required', qname
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    SELECT * INTO pk FROM pg_constraint WHERE conrelid = rel AND contype = 'p';
    IF cardinality(pk.conkey) <> 1 THEN
        RAISE EXCEPTION 'synchro: relation % rejected: composite primary key (% columns) is not supported; exactly one primary-key column is required',
            qname, cardinality(pk.conkey)
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    IF pk.condeferrable THEN
        RAISE EXCEPTION 'synchro: relation % rejected: deferrable primary key "%" is not supported', qname, pk.conname
            USING ERRCODE = 'invalid_table_definition';
    END IF;

    SELECT a.attname, a.atttypid::regtype, a.attgenerated <> '' INTO key_column, key_typ, key_generated
    FROM pg_attribute a WHERE a.attrelid = rel AND a.attnum = pk.conkey[1];
    IF key_generated THEN
        RAISE EXCEPTION 'synchro: relation % rejected: primary-key column "%" is a generated column, which logical decoding does not carry',
            qname, key_column
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    key_type := CASE
        WHEN key_typ IN ('text'::regtype, 'character varying'::regtype, 'uuid'::regtype) THEN 'string'
        WHEN key_typ IN ('smallint'::regtype, 'integer'::regtype) THEN 'int'
        WHEN key_typ = 'bigint'::regtype THEN 'int64'
    END;
    IF key_type IS NULL THEN
        RAISE EXCEPTION 'synchro: relation % rejected: primary-key column "%" has type %, which is not a portable key type (text, varchar, uuid, smallint, integer, bigint)',
            qname, key_column, key_typ
            USING ERRCODE = 'invalid_table_definition';
    END IF;

    SELECT synchro.qualified_name(pc.oid) INTO bad_relation
    FROM pg_class pc
    WHERE (pc.oid = rel OR pc.oid IN (SELECT relid FROM pg_partition_tree(rel)))
      AND pc.relreplident <> 'd'
    ORDER BY pc.oid <> rel, pc.oid
    LIMIT 1;
    IF bad_relation IS NOT NULL THEN
        RAISE EXCEPTION 'synchro: relation % rejected: % has a replica identity other than DEFAULT; only REPLICA IDENTITY DEFAULT backed by the primary key is supported',
            qname, bad_relation
            USING ERRCODE = 'invalid_table_definition';
    END IF;
END
$$;
