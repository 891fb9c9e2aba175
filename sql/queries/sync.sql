-- Sync protocol v3 entry points (docs/protocol.md). Each takes the
-- authenticated user id and the validated request body; refusals arrive as
-- SQLSTATE SY<status> errors (synchro.refuse).

-- name: Connect :one
SELECT synchro.connect(@user_id::text, @request::jsonb)::jsonb AS response;

-- name: Push :one
SELECT synchro.push(@user_id::text, @request::jsonb)::jsonb AS response;

-- name: Pull :one
SELECT synchro.pull(@user_id::text, @request::jsonb, @page_limit::integer)::jsonb AS response;

-- name: Rebuild :one
SELECT synchro.rebuild(@user_id::text, @request::jsonb, @page_limit::integer)::jsonb AS response;

-- name: SyncSchema :one
SELECT synchro.sync_schema()::jsonb AS response;

-- name: SetLockTimeout :exec
-- Bounds how long a push waits for a row lock (then server_retryable).
SELECT set_config('lock_timeout', @timeout::text, true);
