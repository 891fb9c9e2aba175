-- synchro.key_guard: BEFORE UPDATE row trigger of every registered relation
-- (argument: the key column). Side-effect free; rejects any change of the
-- primary-key value with SQLSTATE 0A000. A partition row move changes the key and
-- is rejected here too. The fence re-checks, because a later BEFORE trigger can
-- change the key after this guard ran.
CREATE OR REPLACE FUNCTION synchro.key_guard()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog
AS $$
BEGIN
    IF to_jsonb(OLD) -> TG_ARGV[0] IS DISTINCT FROM to_jsonb(NEW) -> TG_ARGV[0] THEN
        RAISE EXCEPTION 'synchro: primary key change of registered relation %.% is not supported; delete and insert instead',
            TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'feature_not_supported';
    END IF;
    RETURN NEW;
END
$$;
