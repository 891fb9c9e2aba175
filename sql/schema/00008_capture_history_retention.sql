-- +goose Up
-- The event ledger and the write fences are capture history once a transaction
-- is acknowledged: the slot never sends it again, and its versions, edges,
-- effects and digests (what pull reads) do not refer to them. The worker prunes
-- that history after a retention period (synchro.prune_capture_history); this
-- records how far, so that each pruning run starts where the last one ended.
ALTER TABLE synchro.progress ADD COLUMN history_pruned_commit_lsn pg_lsn;

-- +goose Down
ALTER TABLE synchro.progress DROP COLUMN history_pruned_commit_lsn;
