-- +goose Up
-- The event ledger and the write fences are capture history once a transaction
-- is acknowledged: the slot never sends it again, and its versions, edges,
-- effects and digests (what pull reads) do not refer to them. The worker prunes
-- that history after a retention period (synchro.prune_capture_history); this
-- records, per stream generation, how far, so that each pruning run starts where
-- the last one ended. A table of its own: pruning never waits for the progress
-- row, which a materialization holds locked until it commits.
CREATE TABLE synchro.capture_history (
    stream_generation uuid PRIMARY KEY,
    pruned_commit_lsn pg_lsn NOT NULL,
    pruned_at         timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE synchro.capture_history CASCADE;
