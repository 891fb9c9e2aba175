-- synchro.record_acknowledgement: records that the slot was advanced to boundary.
-- The acknowledgement never moves backwards and never passes the processed
-- boundary (the progress CHECK constraints enforce the ordering of docs/change-stream.md).
CREATE OR REPLACE FUNCTION synchro.record_acknowledgement(boundary pg_lsn)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE synchro.progress
    SET acknowledged_end_lsn = boundary, updated_at = now()
    WHERE coalesce(acknowledged_end_lsn, generation_start_lsn) <= boundary;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: acknowledgement % would move backwards', boundary
            USING ERRCODE = 'data_corrupted';
    END IF;
END
$$;
