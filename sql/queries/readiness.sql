-- name: ListReadiness :many
-- The readiness checks (synchro.readiness). A NULL is unknown, and unknown is
-- not ok.
SELECT "check", coalesce(ok, false)::boolean AS ok, coalesce(reason, '')::text AS reason
FROM synchro.readiness;

-- name: IsReady :one
-- Whether capture is ready (every readiness check ok; NULL counts as not ready).
SELECT coalesce(synchro.is_ready(), false)::boolean AS ready;
