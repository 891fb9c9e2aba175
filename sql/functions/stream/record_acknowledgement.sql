-- synchro.record_acknowledgement: records that the slot was advanced to boundary:
-- the active stream's slot, or with staged the candidate slot of the reset whose
-- target generation it is. The acknowledgement never moves backwards and never
-- passes the processed boundary (the progress CHECK constraints enforce the
-- ordering of docs/change-stream.md; a stage checks it here).
DROP FUNCTION IF EXISTS synchro.record_acknowledgement(pg_lsn);
CREATE OR REPLACE FUNCTION synchro.record_acknowledgement(boundary pg_lsn, staged uuid DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF staged IS NULL THEN
        UPDATE synchro.progress
        SET acknowledged_end_lsn = boundary, updated_at = now()
        WHERE coalesce(acknowledged_end_lsn, generation_start_lsn) <= boundary;
    ELSE
        UPDATE synchro.stream_reset
        SET acknowledged_end_lsn = boundary
        WHERE target_generation = staged AND phase = 'catching_up'
          AND acknowledged_end_lsn <= boundary AND boundary <= processed_end_lsn;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: acknowledgement % would move backwards or past the processed boundary', boundary
            USING ERRCODE = 'data_corrupted';
    END IF;
END
$$;
