-- +goose Up
-- Commit lag is measured from source commit times, not from when progress was
-- last written (every batch wrote it, so a worker hours behind read a lag of
-- one batch interval). materialized_commit_time is the source commit time
-- (pgoutput's) of the newest materialized transaction; caught_up_at is the time
-- through which an idle acknowledgement found every committed transaction
-- processed (the time the flush position it acknowledged was read), or the
-- stream's start. Rows of a stream started before this migration take the
-- ledger's commit time and the last progress write.
ALTER TABLE synchro.progress ADD COLUMN materialized_commit_time timestamptz,
                             ADD COLUMN caught_up_at timestamptz;
UPDATE synchro.progress p
SET materialized_commit_time = (SELECT l.commit_time FROM synchro.txn_ledger l
                                WHERE l.stream_generation = p.stream_generation AND l.commit_lsn = p.materialized_commit_lsn),
    caught_up_at = p.updated_at;

-- +goose Down
ALTER TABLE synchro.progress DROP COLUMN materialized_commit_time CASCADE,
                             DROP COLUMN caught_up_at CASCADE;
