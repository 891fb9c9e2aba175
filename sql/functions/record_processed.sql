-- synchro.record_processed: records an idle processed boundary (a WAL flush
-- position read before a decode that found no source transaction). Refused while
-- a blocking poison transaction exists (ADR 001, "Slot acknowledgement").
CREATE OR REPLACE FUNCTION synchro.record_processed(boundary pg_lsn)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT FROM synchro.poison_txn WHERE resolved_at IS NULL) THEN
        RAISE EXCEPTION 'synchro: idle acknowledgement refused: a blocking poison transaction exists'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE synchro.progress SET processed_end_lsn = boundary, updated_at = now()
    WHERE processed_end_lsn < boundary;
END
$$;
