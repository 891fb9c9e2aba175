-- name: BeginReset :exec
SELECT synchro.begin_reset(@reason::text);

-- name: BeginBaseline :exec
SELECT synchro.begin_baseline(@reset_id::uuid, (@consistent_point::text)::pg_lsn, @snapshot_name::text);

-- name: StageBaseline :exec
SELECT synchro.stage_baseline(@reset_id::uuid);

-- name: RequestBarrier :one
SELECT synchro.request_barrier(@reset_id::uuid) AS requested;

-- name: VerifyReset :exec
SELECT synchro.verify_reset(@reset_id::uuid);

-- name: ActivateReset :exec
SELECT synchro.activate_reset(@reset_id::uuid);

-- name: AbortReset :exec
SELECT synchro.abort_reset(@reset_id::uuid);

-- name: RetireReset :one
SELECT coalesce((synchro.retire_reset(@reset_id::uuid)).retirement, '{}')::jsonb AS retirement;

-- name: CurrentReset :one
-- The reset or bootstrap in progress (staging, catching up or ready), if any.
SELECT reset_id, kind, phase, candidate_slot::text AS candidate_slot, target_generation,
       (barrier_end_lsn IS NOT NULL)::boolean AS barrier_reached, coalesce(relation_ids, '{}')::bigint[] AS relation_ids
FROM synchro.stream_reset WHERE phase IN ('staging', 'catching_up', 'ready');

-- name: RecordBootstrap :one
-- A new bootstrap of the relations waiting for one (NULL: none waits).
SELECT synchro.record_bootstrap() AS reset_id;

-- name: BootstrapPhase :one
SELECT phase FROM synchro.stream_reset WHERE reset_id = @reset_id::uuid;

-- name: LatestReset :one
-- The newest reset.
SELECT reset_id FROM synchro.stream_reset ORDER BY started_at DESC LIMIT 1;

-- name: ResetStatus :many
SELECT reset_id, kind, phase, reason, candidate_slot::text AS candidate_slot, slot_state::text AS slot_state, source_generation, target_generation,
       coalesce(consistent_point::text, '')::text AS consistent_point, coalesce(barrier_end_lsn::text, '')::text AS barrier_end_lsn,
       coalesce(staged_through::text, '')::text AS staged_through, coalesce(distance_bytes, 0)::bigint AS distance_bytes,
       relations_staged, rows_staged, fences_covered, txns_caught_up, started_at, phase_at,
       activated_at, retired_at, aborted_at, retirement
FROM synchro.reset_status ORDER BY started_at DESC;

-- name: TryResetLock :one
-- The coordinator's lock: one reset coordinator at a time per database.
SELECT pg_try_advisory_lock(hashtext('synchro.reset'));

-- name: ResetUnlock :exec
SELECT pg_advisory_unlock(hashtext('synchro.reset'));

-- name: EnsureCapturePublication :exec
-- The capture publication exists and holds every registered relation (it may
-- have been dropped: a cause of reset).
SELECT synchro.ensure_publication(publication_name) FROM synchro.settings WHERE publication_name IS NOT NULL;

-- name: ResetProgress :one
SELECT phase, coalesce(staged_through::text, '')::text AS staged_through, coalesce(distance_bytes, 0)::bigint AS distance_bytes,
       txns_caught_up
FROM synchro.reset_status WHERE reset_id = @reset_id::uuid;

-- name: StageBarrierEnd :one
-- The end of a stage's barrier transaction once its catch-up materialized it ('' before).
SELECT coalesce(barrier_end_lsn::text, '')::text AS barrier_end_lsn FROM synchro.stream_reset WHERE target_generation = @staged::uuid;

-- name: StageSyncedRows :one
SELECT staged::integer AS staged, coalesce(last_key, '')::text AS last_key
FROM synchro.stage_synced_rows(@reset_id::uuid, @table_id::integer, sqlc.narg('after_key')::text, @max_rows::integer);

-- name: ActivatedBootstraps :many
-- Bootstraps activated and not yet retired.
SELECT reset_id FROM synchro.stream_reset WHERE kind = 'bootstrap' AND phase = 'activated' ORDER BY activated_at;

-- name: BootstrapWork :one
-- Whether a bootstrap coordinator has work: a relation waiting for its
-- bootstrap, or a bootstrap activated and not yet retired.
SELECT (EXISTS (SELECT FROM synchro.relation WHERE bootstrap_pending)
        OR EXISTS (SELECT FROM synchro.stream_reset WHERE kind = 'bootstrap' AND phase = 'activated'))::boolean AS work;

-- name: SlotExists :one
SELECT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = @slot_name::text)::boolean AS found;

-- name: RestartBootstrap :exec
SELECT synchro.restart_bootstrap(@reset_id::uuid);
