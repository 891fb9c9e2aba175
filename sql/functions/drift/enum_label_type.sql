-- synchro.enum_label_type: the enum type whose label a value of type typ is as
-- text (typ is the enum or a domain over it; in_array false), or whose labels
-- it lists (an array of such; in_array true); NULLs for any other type.
-- Decoded row images carry such values as that text
-- (synchro.record_decoded_enum_labels). The types PostgreSQL defines itself
-- (OIDs below FirstNormalObjectId, 16384) include no enum and no domain over
-- one, so they are answered without a lookup.
CREATE OR REPLACE FUNCTION synchro.enum_label_type(typ oid, OUT enum_type oid, OUT in_array boolean)
LANGUAGE plpgsql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
BEGIN
    in_array := false;
    WHILE typ >= 16384 LOOP
        SELECT p.typtype, p.typbasetype, p.typelem, p.typsubscript = 'array_subscript_handler'::regproc AS is_array
        INTO t FROM pg_type p WHERE p.oid = typ;
        IF t.typtype = 'e' THEN
            enum_type := typ;
            RETURN;
        ELSIF t.typtype = 'd' THEN
            typ := t.typbasetype;
        ELSIF t.is_array AND NOT in_array THEN
            typ := t.typelem;
            in_array := true;
        ELSE
            EXIT;
        END IF;
    END LOOP;
    in_array := NULL;
END
$$;
