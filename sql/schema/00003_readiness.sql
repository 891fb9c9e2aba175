-- +goose Up
-- Readiness limits (docs/change-stream.md, "Readiness"). NULL means not configured, which is
-- not ready: synchro.readiness never assumes a default bound. synchrod sets them
-- at startup through synchro.configure_readiness.
ALTER TABLE synchro.settings
    -- Largest age of the worker heartbeat that still counts as fresh.
    ADD COLUMN heartbeat_max_age interval,
    -- Largest WAL distance (bytes) from the current WAL position to the slot.
    ADD COLUMN wal_lag_limit_bytes bigint,
    -- Largest time WAL may wait unacknowledged behind the flush position.
    ADD COLUMN commit_lag_limit interval,
    -- The one database of this cluster that Synchro captures (v0.3 topology).
    ADD COLUMN worker_database name;

-- +goose Down
ALTER TABLE synchro.settings
    DROP COLUMN heartbeat_max_age CASCADE,
    DROP COLUMN wal_lag_limit_bytes CASCADE,
    DROP COLUMN commit_lag_limit CASCADE,
    DROP COLUMN worker_database CASCADE;
