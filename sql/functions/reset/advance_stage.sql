-- synchro.advance_stage: moves a reset stage's progress to the last of the
-- transactions its staged catch-up just materialized (synchro_seg_txn, in the
-- caller's transaction, from synchro.materialize_transaction). The reset's
-- barrier transaction (recorded by synchro.request_barrier; decoded xids are
-- its low 32 bits) must be the batch's last when the batch holds it (22023
-- otherwise: nothing after the barrier belongs to the stage); its commit and
-- end positions are recorded, which ends the catch-up. A bootstrap's stage
-- catches up before its barrier is written.
CREATE OR REPLACE FUNCTION synchro.advance_stage(staged uuid)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r synchro.stream_reset;
    b_seq integer;
    b_commit pg_lsn;
    b_end pg_lsn;
BEGIN
    SELECT * INTO STRICT r FROM synchro.stream_reset WHERE target_generation = staged FOR UPDATE;
    IF r.barrier_xid IS NOT NULL THEN
        SELECT t.seq, t.commit_lsn, t.end_lsn INTO b_seq, b_commit, b_end
        FROM synchro_seg_txn t WHERE t.xid = r.barrier_xid::text::bigint % 4294967296;
        IF FOUND AND EXISTS (SELECT FROM synchro_seg_txn t WHERE t.seq > b_seq) THEN
            RAISE EXCEPTION 'synchro: the staged catch-up of reset % was given transactions after its barrier', r.reset_id
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    UPDATE synchro.stream_reset x
    SET (materialized_commit_lsn, materialized_commit_time, materialized_end_lsn, processed_end_lsn, registry_generation) =
        (SELECT t.commit_lsn, t.commit_time, t.end_lsn, greatest(x.processed_end_lsn, t.end_lsn),
                greatest(x.registry_generation, (SELECT max(a.registry_generation) FROM synchro_seg_txn a))
         FROM synchro_seg_txn t ORDER BY t.seq DESC LIMIT 1),
        txns_caught_up = x.txns_caught_up + (SELECT count(*) FROM synchro_seg_txn),
        barrier_commit_lsn = coalesce(x.barrier_commit_lsn, b_commit), barrier_end_lsn = coalesce(x.barrier_end_lsn, b_end)
    WHERE x.reset_id = r.reset_id;
END
$$;
