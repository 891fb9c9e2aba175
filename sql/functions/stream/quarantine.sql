-- synchro.quarantine: records (or counts another failed attempt of) the blocking
-- poison transaction at commit_at. The record is redacted by construction: a
-- bounded failure class, an SQLSTATE and the registered relation id, never row
-- values or error text.
CREATE OR REPLACE FUNCTION synchro.quarantine(commit_at pg_lsn, end_at pg_lsn, txid bigint,
                                              failure text, state text, rid bigint)
RETURNS bigint
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO synchro.poison_txn AS p (stream_generation, commit_lsn, end_lsn, xid, failure_class, sqlstate, relation_id)
    SELECT stream_generation, commit_at, end_at, txid, failure, state, rid FROM synchro.progress
    ON CONFLICT (stream_generation, commit_lsn) WHERE resolved_at IS NULL DO UPDATE
        SET attempts = p.attempts + 1, last_failed_at = now(), failure_class = EXCLUDED.failure_class,
            sqlstate = EXCLUDED.sqlstate, relation_id = EXCLUDED.relation_id, retry_requested_at = NULL
    RETURNING poison_id
$$;
