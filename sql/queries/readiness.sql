-- name: ListReadiness :many
SELECT "check", ok, reason FROM synchro.readiness;
