-- Privileges of the function bundle, applied after every other folder (last in
-- load_order.txt): nothing in the synchro schema is executable by PUBLIC.
-- Operator functions and views belong to synchro_operator; the HTTP service
-- role (synchro_service) gets only what its entry points grant it. Fence and
-- guard triggers fire regardless of EXECUTE, also the generated ones of schema
-- synchro_capture (synchro.install_capture_functions revokes on each it makes).
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA synchro FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA synchro_capture FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.retry_poison(bigint) TO synchro_operator;
GRANT SELECT ON synchro.poison TO synchro_operator;
GRANT EXECUTE ON FUNCTION synchro.stream_status() TO synchro_operator;
-- Retention and storage: positions, times, counts and sizes, no row data.
GRANT EXECUTE ON FUNCTION synchro.history_status(), synchro.storage_status() TO synchro_operator;
-- What synchroctl status and registry list read besides: worker heartbeats and
-- the registered relations (identities, keys, wire names; no row data).
GRANT SELECT ON synchro.worker_heartbeat TO synchro_operator;
GRANT SELECT (relation_id, registration_kind, schema_name, relation_name, relation_oid, key_column, key_type, generation,
               bootstrap_pending)
    ON synchro.relation TO synchro_operator;
GRANT SELECT (relation_id, table_id, name, push_policy) ON synchro.synced_table TO synchro_operator;
GRANT SELECT ON synchro.readiness TO synchro_operator;
-- The view calls it with the reader's privileges; it reads the tables as definer.
GRANT EXECUTE ON FUNCTION synchro.evaluate_readiness() TO synchro_operator;
GRANT EXECUTE ON FUNCTION synchro.is_ready() TO synchro_operator;
GRANT EXECUTE ON FUNCTION synchro.configure_readiness(interval, bigint, interval, name) TO synchro_operator;
GRANT EXECUTE ON FUNCTION synchro.configure_protocol(integer, text) TO synchro_operator;
GRANT EXECUTE ON FUNCTION synchro.configure_client_retention(interval) TO synchro_operator;
-- Stream reset: operators read its state and activate, abort or retire it; the
-- phases that read the application's tables and create slots run as the owner
-- (synchroctl reset start with the worker's database URL).
GRANT SELECT ON synchro.reset_status TO synchro_operator;
GRANT EXECUTE ON FUNCTION synchro.slot_state(name) TO synchro_operator;
GRANT EXECUTE ON FUNCTION synchro.activate_reset(uuid), synchro.abort_reset(uuid),
    synchro.retire_reset(uuid) TO synchro_operator;
-- Registry changes are the owner's (they install triggers on the application's
-- tables), as registration is.
-- synchro.synced_row carries row data (keys; a checksum over key and image confirms
-- guessed values): not the operator's. Earlier bundles granted it, and CREATE OR
-- REPLACE VIEW keeps grants, so it is revoked explicitly.
REVOKE ALL ON synchro.synced_row FROM synchro_operator;
-- The HTTP service role: the sync entry points (security definer; they take the
-- authenticated user id from the HTTP layer) and readiness for GET /readyz.
GRANT EXECUTE ON FUNCTION synchro.connect(text, jsonb), synchro.push(text, jsonb, bigint), synchro.pull(text, jsonb, integer, bigint),
    synchro.rebuild(text, jsonb, integer, bigint), synchro.sync_schema() TO synchro_service;
GRANT EXECUTE ON FUNCTION synchro.evaluate_readiness(), synchro.is_ready() TO synchro_service;
GRANT SELECT ON synchro.readiness TO synchro_service;
