-- synchro.check_reference: raises (22023), naming the registered relation,
-- unless column col of relation src is a single-column foreign key to the
-- primary key of relation target, which is what the rule's step compares it
-- with. When required is false (a path step naming its "references") a column
-- with no foreign key at all passes: the rule declares the reference itself.
-- The message says what the column references instead, or that it references
-- nothing: a rule that follows the wrong column would put every row in no
-- scope without any error.
CREATE OR REPLACE FUNCTION synchro.check_reference(src oid, col name, target oid, required boolean,
                                                   registered oid, context text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target_key name := (SELECT a.attname FROM pg_index i
                        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                        WHERE i.indrelid = target AND i.indisprimary AND i.indnatts = 1);
    refs text;
BEGIN
    IF EXISTS (SELECT FROM pg_constraint c
               JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
               JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = c.confkey[1]
               WHERE c.conrelid = src AND c.contype = 'f' AND cardinality(c.conkey) = 1
                 AND a.attname = col AND c.confrelid = target AND fa.attname = target_key) THEN
        RETURN;
    END IF;
    SELECT string_agg(format('%s (%s)', synchro.qualified_name(c.confrelid),
                             (SELECT string_agg(quote_ident(fa.attname), ', ' ORDER BY k.ord)
                              FROM unnest(c.confkey) WITH ORDINALITY k(attnum, ord)
                              JOIN pg_attribute fa ON fa.attrelid = c.confrelid AND fa.attnum = k.attnum)),
                      ', ' ORDER BY c.conname) INTO refs
    FROM pg_constraint c
    WHERE c.conrelid = src AND c.contype = 'f'
      AND (SELECT attnum FROM pg_attribute WHERE attrelid = src AND attname = col) = ANY (c.conkey);
    IF refs IS NULL AND NOT required THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'synchro: relation % rejected: % column "%" of % must be a single-column foreign key to the primary key of %, but it references %',
        synchro.qualified_name(registered), context, col, synchro.qualified_name(src), synchro.qualified_name(target),
        coalesce(refs, 'nothing')
        USING ERRCODE = 'invalid_parameter_value';
END
$$;
