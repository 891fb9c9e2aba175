-- synchro.start_stream: creates the progress row of a new, empty stream generation
-- whose generation_start is the consistent point of the freshly created slot. The
-- registry generation active at generation_start is the latest durable one.
CREATE OR REPLACE FUNCTION synchro.start_stream(slot name, start_lsn pg_lsn)
RETURNS uuid
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO synchro.progress (stream_generation, slot_name, generation_start_lsn, processed_end_lsn, registry_generation)
    SELECT gen_random_uuid(), slot, start_lsn, start_lsn, max(generation) FROM synchro.registry_generation
    RETURNING stream_generation
$$;
