-- Queries of the capture path (internal/capture): the registry it pairs row
-- events under and the position a streaming session starts from.

-- name: LoadRegistry :many
-- Every registration, whatever its generation, with its projected columns and
-- their registered types, whether it waits for its projection bootstrap, and
-- whether its unregistration is recorded and not activated yet (the one query of the registry's rows: the worker's
-- registry and internal/testdb's resolver read it).
SELECT r.relation_id, r.registration_kind, r.schema_name, r.relation_name, r.relation_oid::bigint AS relation_oid,
       r.key_column, r.key_type, r.columns::text[] AS columns, r.column_types, r.generation, t.table_id, r.bootstrap_pending,
       EXISTS (SELECT FROM synchro.stream_reset b
               WHERE b.kind = 'bootstrap' AND b.phase = 'ready' AND b.registration ->> 'op' = 'unregister'
                 AND (b.registration ->> 'relation_id')::bigint = r.relation_id)::boolean AS unregistering
FROM synchro.relation r LEFT JOIN synchro.synced_table t USING (relation_id);

-- name: LatestRegistryGeneration :one
SELECT max(generation)::bigint AS latest FROM synchro.registry_generation;

-- name: GetMaterializedPosition :one
-- The registry generation active after the last materialized transaction and
-- the materialized high-watermark (the generation start before any) of the
-- active stream, or (staged) of a reset's stage.
SELECT p.registry_generation, coalesce(p.materialized_commit_lsn, p.generation_start_lsn)::text AS durable_lsn
FROM synchro.stream_progress(sqlc.narg('staged')::uuid) p;

-- name: AwaitVisible :exec
SELECT synchro.await_visible(@xids::bigint[]);

-- name: SetupMaterialization :exec
SELECT set_config('client_connection_check_interval', '1000', false),
       synchro.lift_timeouts(false), set_config('default_transaction_isolation', 'read committed', false);

-- name: MaterializeScratch :exec
SELECT synchro.materialize_scratch();

-- name: MaterializeTransaction :exec
SELECT synchro.materialize_transaction(@batch::jsonb, sqlc.narg('staged')::uuid);

-- name: BootstrapAtBarrier :one
-- What the capture worker needs of a bootstrap whose barrier it decoded: its
-- phase, the barrier's commit position once its stage reached it (none for a
-- change with nothing to stage: its barrier is the transaction with its
-- xid, low 32 bits), and its relations.
SELECT phase, coalesce(barrier_commit_lsn::text, '')::text AS barrier_commit_lsn, relation_ids::bigint[] AS relation_ids,
       coalesce(barrier_xid::text::bigint % 4294967296, -1)::bigint AS barrier_xid
FROM synchro.stream_reset WHERE reset_id = @reset_id::uuid AND kind = 'bootstrap';
