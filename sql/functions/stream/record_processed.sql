-- synchro.record_processed: records an idle processed boundary (a WAL flush
-- position read, at time read_at, before a decode that found no source
-- transaction): every transaction committed before read_at is processed, so
-- caught_up_at (synchro.commit_lag) moves to read_at. Refused while a blocking
-- poison transaction exists (docs/change-stream.md, "Slot acknowledgement").
-- With staged, the boundary is a reset stage's (refused, 55000, once its
-- barrier is materialized: nothing after the barrier belongs to it).
DROP FUNCTION IF EXISTS synchro.record_processed(pg_lsn);
DROP FUNCTION IF EXISTS synchro.record_processed(pg_lsn, timestamptz);
CREATE OR REPLACE FUNCTION synchro.record_processed(boundary pg_lsn, read_at timestamptz, staged uuid DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF staged IS NOT NULL THEN
        UPDATE synchro.stream_reset
        SET processed_end_lsn = greatest(processed_end_lsn, boundary)
        WHERE target_generation = staged AND phase = 'catching_up' AND barrier_end_lsn IS NULL;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'synchro: reset stage % takes no idle boundary: it is not catching up to a barrier', staged
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM synchro.poison_txn WHERE resolved_at IS NULL) THEN
        RAISE EXCEPTION 'synchro: idle acknowledgement refused: a blocking poison transaction exists'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE synchro.progress
    SET processed_end_lsn = greatest(processed_end_lsn, boundary),
        caught_up_at = greatest(caught_up_at, read_at), updated_at = now()
    WHERE processed_end_lsn <= boundary;
END
$$;
