-- synchro.await_visible: waits until none of the source transactions xids (32-bit,
-- as decoded) is still in progress in a fresh snapshot, for at most timeout. A
-- commit is decoded from WAL as soon as its record is flushed, a moment before
-- the committing backend leaves the proc array and its writes (its fence rows)
-- become visible to other snapshots; materializing in that moment would find
-- the fences missing and quarantine a healthy transaction. After the timeout it
-- raises serialization_failure (40001): a passing condition that restarts the
-- worker's session and retries, never a poison.
CREATE OR REPLACE FUNCTION synchro.await_visible(xids bigint[], timeout interval DEFAULT '10 seconds')
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + timeout;
BEGIN
    -- A 32-bit xid at or after the snapshot's xmax (within half the xid space)
    -- has not completed as of the snapshot; one before it has completed unless
    -- the snapshot lists it as running (compared in the low 32 bits, exact
    -- within that window). All in bigint: no per-xid epoch arithmetic in numeric.
    WHILE EXISTS (SELECT FROM (SELECT pg_snapshot_xmax(s.snap)::text::bigint % 4294967296 AS xmax,
                                      ARRAY(SELECT r::text::bigint % 4294967296 FROM pg_snapshot_xip(s.snap) r) AS running
                               FROM (SELECT pg_current_snapshot() AS snap) s) m,
                              unnest(xids) AS x(xid)
                  WHERE ((x.xid - m.xmax) % 4294967296 + 4294967296) % 4294967296 < 2147483648
                     OR x.xid = ANY (m.running)) LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'synchro: decoded source transactions are still not visible after %', timeout
                USING ERRCODE = 'serialization_failure';
        END IF;
        PERFORM pg_sleep(0.001);
    END LOOP;
END
$$;
