-- +goose Up
-- Retention horizon of the pull history (docs/operations.md, "History
-- retention"). Each stream generation has one horizon: a commit position at or
-- before which its effects, superseded row versions, closed membership edges
-- and superseded scope digests are removed (synchro.prune_history). A scope
-- cursor before transaction_end(horizon) is answered with its scope in
-- rebuild, a rebuild session whose position is before it is refused
-- (rebuild_expired), so nothing served ever needs a removed row. The horizon
-- and the removal move together, in one transaction per bounded batch. The
-- row also keeps what the last pruning round removed and how long it took.
-- A table of its own: pruning never waits for the progress row, which a
-- materialization holds locked until it commits.
CREATE TABLE synchro.history_horizon (
    stream_generation uuid PRIMARY KEY,
    horizon_lsn       pg_lsn NOT NULL,
    advanced_at       timestamptz NOT NULL DEFAULT now(),
    round_started_at  timestamptz NOT NULL,
    round_ended_at    timestamptz NOT NULL,
    round_effects     bigint NOT NULL DEFAULT 0,
    round_versions    bigint NOT NULL DEFAULT 0,
    round_edges       bigint NOT NULL DEFAULT 0,
    round_digests     bigint NOT NULL DEFAULT 0
);

-- Pruning finds what lies at or before a position without reading the tables
-- whole: rows in commit order per generation (the edges by where they closed).
CREATE INDEX effect_position ON synchro.effect (stream_generation, commit_lsn);
CREATE INDEX row_version_position ON synchro.row_version (stream_generation, commit_lsn);
CREATE INDEX membership_closed ON synchro.membership (stream_generation, to_lsn) WHERE to_lsn IS NOT NULL;
CREATE INDEX scope_digest_position ON synchro.scope_digest (stream_generation, commit_lsn);

-- +goose Down
DROP INDEX synchro.scope_digest_position;
DROP INDEX synchro.membership_closed;
DROP INDEX synchro.row_version_position;
DROP INDEX synchro.effect_position;
DROP TABLE synchro.history_horizon CASCADE;
