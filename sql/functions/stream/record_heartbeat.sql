-- synchro.record_heartbeat: a worker's periodic report of its state and the
-- registry generation and materialized position it has reached. It also
-- forgets the rows of other workers silent for a day: a restarted synchrod
-- reports under a new worker id (host and pid by default), and the rows of the
-- processes before it would otherwise stay listed (synchroctl status) for good.
CREATE OR REPLACE FUNCTION synchro.record_heartbeat(worker text, worker_state text, started timestamptz, slot name,
                                                    registry_gen bigint, mat_commit pg_lsn, mat_end pg_lsn)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM synchro.worker_heartbeat WHERE worker_id <> worker AND heartbeat_at < now() - interval '1 day';
    INSERT INTO synchro.worker_heartbeat AS h (worker_id, database_name, slot_name, state, heartbeat_at,
                                               registry_generation, materialized_commit_lsn, materialized_end_lsn, started_at)
    VALUES (worker, current_database(), slot, worker_state, now(), registry_gen, mat_commit, mat_end, started)
    ON CONFLICT (worker_id) DO UPDATE
        SET state = EXCLUDED.state, heartbeat_at = EXCLUDED.heartbeat_at, slot_name = EXCLUDED.slot_name,
            registry_generation = EXCLUDED.registry_generation,
            materialized_commit_lsn = EXCLUDED.materialized_commit_lsn,
            materialized_end_lsn = EXCLUDED.materialized_end_lsn, started_at = EXCLUDED.started_at
$$;
