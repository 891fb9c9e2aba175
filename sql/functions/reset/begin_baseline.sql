-- synchro.begin_baseline: records, first in the transaction that imported the
-- candidate slot's exported snapshot (snapshot_name, taken at the slot's
-- consistent_point), the boundary of reset id's baseline: every transaction
-- committed before the consistent point is in the snapshot, every later one
-- is decoded from the slot. The baseline's position is just before the
-- consistent point; the staged stream starts processed and acknowledged at
-- it. Refused (55000) for a reset not staging or one whose boundary is set.
CREATE OR REPLACE FUNCTION synchro.begin_baseline(id uuid, consistent_point pg_lsn, snapshot_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE synchro.stream_reset r
    SET consistent_point = begin_baseline.consistent_point, snapshot_name = begin_baseline.snapshot_name,
        baseline_lsn = begin_baseline.consistent_point - 1,
        processed_end_lsn = begin_baseline.consistent_point, acknowledged_end_lsn = begin_baseline.consistent_point
    WHERE r.reset_id = id AND r.phase = 'staging' AND r.consistent_point IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: reset % is not staging without a boundary', id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;
