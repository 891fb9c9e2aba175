-- synchro.key_guard: BEFORE UPDATE OR DELETE row trigger of every registered
-- relation (arguments: the key column; 'partitioned' for a partitioned table).
-- Rejects, with SQLSTATE 0A000 and no other effect:
--   * an UPDATE that changes the primary-key value (the fence re-checks, because
--     a later BEFORE trigger can change the key after this guard ran);
--   * a partition row move. PostgreSQL runs a move as BEFORE UPDATE then BEFORE
--     DELETE of the same tuple on the source partition, so on a partitioned table
--     the UPDATE branch notes the tuple in the transaction-local setting
--     synchro.updating and the DELETE branch refuses a delete of that tuple. (A
--     move whose key a later BEFORE trigger changed arrives here that way too.)
CREATE OR REPLACE FUNCTION synchro.key_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- A copy of NEW (its tuple, TOAST pointers and all). Rendering a record
    -- (to_jsonb) detoasts its out-of-line values in place, and NEW returned
    -- so would be a rebuilt tuple whose large values PostgreSQL stores and
    -- logs again: a one-word update of a row with a 4 MB value wrote 4 MB of
    -- WAL. Returned untouched, NEW keeps them where they are.
    new_row record;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        new_row := NEW;
        IF to_jsonb(OLD) -> TG_ARGV[0] IS DISTINCT FROM to_jsonb(new_row) -> TG_ARGV[0] THEN
            RAISE EXCEPTION 'synchro: primary key change of registered relation %.% is not supported; delete and insert instead',
                TG_TABLE_SCHEMA, TG_TABLE_NAME
                USING ERRCODE = 'feature_not_supported';
        END IF;
        IF TG_ARGV[1] = 'partitioned' THEN
            PERFORM set_config('synchro.updating', TG_RELID::text || ':' || OLD.ctid::text, true);
        END IF;
        RETURN NEW;
    END IF;
    IF TG_ARGV[1] = 'partitioned'
       AND current_setting('synchro.updating', true) = TG_RELID::text || ':' || OLD.ctid::text THEN
        RAISE EXCEPTION 'synchro: moving a row of registered relation %.% to another partition changes its key; delete and insert instead',
            TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'feature_not_supported';
    END IF;
    RETURN OLD;
END
$$;
