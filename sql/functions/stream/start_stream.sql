-- synchro.start_stream: creates the progress row of a new, empty stream generation
-- whose generation_start is the consistent point of the freshly created slot. The
-- registry generation active at generation_start is the latest durable one.
-- slot_created_at is a time read before the slot was created: no transaction the
-- stream captures committed before it (caught_up_at, synchro.commit_lag).
DROP FUNCTION IF EXISTS synchro.start_stream(name, pg_lsn);
CREATE OR REPLACE FUNCTION synchro.start_stream(slot name, start_lsn pg_lsn, slot_created_at timestamptz)
RETURNS uuid
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO synchro.progress (stream_generation, slot_name, generation_start_lsn, processed_end_lsn, registry_generation,
                                  caught_up_at)
    SELECT gen_random_uuid(), slot, start_lsn, start_lsn, max(generation), slot_created_at FROM synchro.registry_generation
    RETURNING stream_generation
$$;
