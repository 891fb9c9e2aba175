-- synchro.configure_readiness: operator function that sets the readiness limits
-- and the configured Synchro database (docs/change-stream.md, "Readiness"). Values are stored
-- as given: NULL (not configured), an infinite interval or a non-positive limit
-- is unbounded, and synchro.readiness reports it as not ready.
CREATE OR REPLACE FUNCTION synchro.configure_readiness(heartbeat_max_age interval, wal_lag_limit_bytes bigint,
                                                       commit_lag_limit interval, worker_database name)
RETURNS void
LANGUAGE plpgsql
-- Definer: the operator role sets the limits without rights on the settings table.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE synchro.settings
    SET heartbeat_max_age = configure_readiness.heartbeat_max_age,
        wal_lag_limit_bytes = configure_readiness.wal_lag_limit_bytes,
        commit_lag_limit = configure_readiness.commit_lag_limit,
        worker_database = configure_readiness.worker_database;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'synchro: the settings row is missing; run synchroctl migrate'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;
