-- name: ConfigureReadiness :exec
-- Records the readiness limits of this database (synchro.readiness),
-- durations in microseconds; each synchrod sets them at start, the last one
-- to start wins.
SELECT synchro.configure_readiness(interval '1 microsecond' * sqlc.arg(heartbeat_max_age_us)::bigint, sqlc.arg(wal_lag_limit_bytes)::bigint,
                                   interval '1 microsecond' * sqlc.arg(commit_lag_limit_us)::bigint, current_database());

-- name: ConfigureProtocol :exec
-- Records the lowest protocol version and app version connect accepts (an
-- empty app version: any), set by each synchrod at start.
SELECT synchro.configure_protocol(int4(sqlc.arg(min_protocol_version)::bigint), nullif(sqlc.arg(min_app_version)::text, ''));
