-- synchro.poison: the blocking poison transactions of the active stream, for psql.
-- Redacted: position, bounded class, SQLSTATE and relation, never row values.
CREATE OR REPLACE VIEW synchro.poison AS
SELECT p.poison_id, p.stream_generation, p.commit_lsn, p.end_lsn, p.xid, p.failure_class, p.sqlstate,
       p.relation_id, r.schema_name || '.' || r.relation_name AS relation, p.attempts,
       p.first_failed_at, p.last_failed_at, p.retry_requested_at
FROM synchro.poison_txn p
LEFT JOIN synchro.relation r ON r.relation_id = p.relation_id
WHERE p.resolved_at IS NULL;
