-- synchro.readiness: the fail-closed capture readiness of docs/change-stream.md, "Readiness":
-- one row per check in a fixed order (database, worker, registry, triggers,
-- publication, slot, poison, positions, heartbeat_age, wal_lag, commit_lag,
-- worker_database) with ok and a short reason. Ready means every row is ok
-- (synchro.is_ready()); the checks are computed by synchro.evaluate_readiness.
CREATE OR REPLACE VIEW synchro.readiness AS
SELECT (c ->> 'check')::text AS "check", (c ->> 'ok')::boolean AS ok, (c ->> 'reason')::text AS reason
FROM synchro.evaluate_readiness() AS c;
