-- Sync protocol v3 entry points (docs/protocol.md). Each takes the
-- authenticated user id and the validated request body; refusals arrive as
-- SQLSTATE SY<status> errors (synchro.refuse).

-- name: Connect :one
SELECT synchro.connect(@user_id::text, @request::jsonb)::jsonb AS response;

-- name: Push :one
SELECT synchro.push(@user_id::text, @request::jsonb, @row_bytes::bigint)::jsonb AS response;

-- name: Pull :one
SELECT synchro.pull(@user_id::text, @request::jsonb, @page_limit::integer, @page_bytes::bigint)::json AS response;

-- name: Rebuild :one
SELECT synchro.rebuild(@user_id::text, @request::jsonb, @page_limit::integer, @page_bytes::bigint)::json AS response;

-- name: SyncSchema :one
SELECT synchro.sync_schema()::jsonb AS response;

-- name: SetPushTimeouts :exec
-- Bounds how long a push waits for a row lock (then server_retryable) and how
-- long its whole statement, the push transaction's work, may run (then the
-- push is rolled back and answered retry_later).
SELECT set_config('lock_timeout', @lock_timeout::text, true),
       set_config('statement_timeout', @statement_timeout::text, true);
