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
SET search_path = pg_catalog
AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + timeout;
BEGIN
    WHILE EXISTS (SELECT FROM pg_snapshot_xip(pg_current_snapshot()) x
                  WHERE (x::text::numeric % 4294967296)::bigint = ANY (xids)) LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'synchro: decoded source transactions are still not visible after %', timeout
                USING ERRCODE = 'serialization_failure';
        END IF;
        PERFORM pg_sleep(0.001);
    END LOOP;
END
$$;
