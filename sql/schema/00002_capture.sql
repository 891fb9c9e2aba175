-- +goose Up
-- Capture: stream progress, replay ledgers, projections' derived state (row
-- versions, membership edges, pull effects, scope digests), poison quarantine and
-- worker heartbeat (docs/change-stream.md, "Commit-safe stream position" through "Poison-event
-- quarantine and recovery").

-- The durable progress of the active stream generation. The CHECKs are the
-- position ordering of docs/change-stream.md: generation_start <= acknowledged <= processed and
-- materialized_end <= processed (a NULL acknowledgement equals generation_start).
CREATE TABLE synchro.progress (
    singleton               boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    stream_generation       uuid NOT NULL,
    slot_name               name NOT NULL,
    database_name           name NOT NULL DEFAULT current_database(),
    generation_start_lsn    pg_lsn NOT NULL,
    -- High-watermark: transaction_end(materialized_commit_lsn); NULL = generation_start.
    materialized_commit_lsn pg_lsn,
    materialized_end_lsn    pg_lsn,
    processed_end_lsn       pg_lsn NOT NULL,
    acknowledged_end_lsn    pg_lsn,
    registry_generation     bigint NOT NULL REFERENCES synchro.registry_generation,
    updated_at              timestamptz NOT NULL DEFAULT now(),
    CHECK (generation_start_lsn <= coalesce(acknowledged_end_lsn, generation_start_lsn)),
    CHECK (coalesce(acknowledged_end_lsn, generation_start_lsn) <= processed_end_lsn),
    CHECK (materialized_end_lsn IS NULL OR materialized_end_lsn <= processed_end_lsn),
    CHECK (materialized_commit_lsn IS NULL OR materialized_commit_lsn >= generation_start_lsn)
);

-- Replay ledger: one row per materialized source transaction, keyed by its replay
-- identity (stream_generation, commit_lsn), even when no event applied.
CREATE TABLE synchro.txn_ledger (
    stream_generation   uuid NOT NULL,
    commit_lsn          pg_lsn NOT NULL,
    end_lsn             pg_lsn NOT NULL,
    xid                 bigint NOT NULL,
    commit_time         timestamptz NOT NULL,
    event_count         integer NOT NULL,
    applied_count       integer NOT NULL,
    materialized_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (stream_generation, commit_lsn)
);

-- Replay ledger: every applicable event, keyed (stream_generation, commit_lsn,
-- event_ordinal), with the fence it was reconciled with.
CREATE TABLE synchro.event_ledger (
    stream_generation uuid NOT NULL,
    commit_lsn        pg_lsn NOT NULL,
    event_ordinal     integer NOT NULL,
    relation_id       bigint NOT NULL,
    op                text NOT NULL,
    key               text NOT NULL,
    fence_id          uuid NOT NULL, -- at most once: materialization marks its fence materialized
    version           text NOT NULL,
    -- Written with its txn_ledger row in the same materialization (no FK: a
    -- per-row check would cost more than the rest of the row's ledger entry).
    PRIMARY KEY (stream_generation, commit_lsn, event_ordinal)
);

-- Immutable row versions of synced rows: the wire image (synced columns) and its
-- checksum (uint32). A deletion keeps a version with a NULL image. A row's
-- current version is its latest one (row_version_history, synchro.synced_row).
CREATE TABLE synchro.row_version (
    version           text PRIMARY KEY,
    table_id          integer NOT NULL,
    key               text NOT NULL,
    image             jsonb,
    checksum          bigint NOT NULL CHECK (checksum BETWEEN 0 AND 4294967295),
    stream_generation uuid NOT NULL,
    commit_lsn        pg_lsn NOT NULL,
    event_ordinal     integer NOT NULL
);
CREATE INDEX row_version_history ON synchro.row_version (table_id, key, commit_lsn);

-- Membership edges: row (table_id, key) is in scope during [from_lsn, to_lsn) of
-- the stream (transaction-end points); to_lsn NULL means still a member.
CREATE TABLE synchro.membership (
    stream_generation uuid NOT NULL,
    scope             text NOT NULL,
    table_id          integer NOT NULL,
    key               text NOT NULL,
    from_lsn          pg_lsn NOT NULL,
    to_lsn            pg_lsn,
    PRIMARY KEY (stream_generation, scope, table_id, key, from_lsn)
);
CREATE UNIQUE INDEX membership_open ON synchro.membership (stream_generation, table_id, key, scope) WHERE to_lsn IS NULL;

-- Pull-visible effects, in delivery position order per scope.
CREATE TABLE synchro.effect (
    stream_generation uuid NOT NULL,
    scope             text NOT NULL,
    commit_lsn        pg_lsn NOT NULL,
    event_ordinal     integer NOT NULL,
    effect_ordinal    integer NOT NULL,
    table_id          integer NOT NULL,
    key               text NOT NULL,
    op                text NOT NULL CHECK (op IN ('upsert', 'delete')),
    version           text,
    CHECK ((op = 'upsert') = (version IS NOT NULL)),
    PRIMARY KEY (stream_generation, scope, commit_lsn, event_ordinal, effect_ordinal)
);

-- Scope digests: the sum (mod 2^32) of the row checksums in a scope after each
-- transaction that changed it. The checksum at P is the latest digest at or before P.
CREATE TABLE synchro.scope_digest (
    stream_generation uuid NOT NULL,
    scope             text NOT NULL,
    commit_lsn        pg_lsn NOT NULL,
    digest            bigint NOT NULL CHECK (digest BETWEEN 0 AND 4294967295),
    row_count         bigint NOT NULL,
    PRIMARY KEY (stream_generation, scope, commit_lsn)
);

-- Blocking poison transactions: redacted (no row values, bounded class, SQLSTATE).
CREATE TABLE synchro.poison_txn (
    poison_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream_generation  uuid NOT NULL,
    commit_lsn         pg_lsn NOT NULL,
    end_lsn            pg_lsn NOT NULL,
    xid                bigint NOT NULL,
    failure_class      text NOT NULL CHECK (failure_class ~ '^[a-z_]{1,40}$'),
    sqlstate           text CHECK (sqlstate ~ '^[0-9A-Z]{5}$'),
    relation_id        bigint,
    attempts           integer NOT NULL DEFAULT 1,
    first_failed_at    timestamptz NOT NULL DEFAULT now(),
    last_failed_at     timestamptz NOT NULL DEFAULT now(),
    retry_requested_at timestamptz,
    resolved_at        timestamptz
);
CREATE UNIQUE INDEX poison_txn_active ON synchro.poison_txn (stream_generation, commit_lsn) WHERE resolved_at IS NULL;

-- Worker heartbeats: what each worker process last reported.
CREATE TABLE synchro.worker_heartbeat (
    worker_id               text PRIMARY KEY,
    database_name           name NOT NULL,
    slot_name               name NOT NULL,
    state                   text NOT NULL,
    heartbeat_at            timestamptz NOT NULL,
    registry_generation     bigint,
    materialized_commit_lsn pg_lsn,
    materialized_end_lsn    pg_lsn,
    started_at              timestamptz NOT NULL
);

-- +goose Down
-- The capture stream's slot goes with the progress that names it, last: a slot
-- cannot be dropped in a transaction that rolls back, and one in use (synchrod
-- running) fails the rollback. Dropping a slot needs the REPLICATION attribute.
-- +goose StatementBegin
DO $$
DECLARE
    slot name := (SELECT slot_name FROM synchro.progress);
BEGIN
    DROP TABLE synchro.worker_heartbeat, synchro.poison_txn, synchro.scope_digest, synchro.effect,
        synchro.membership, synchro.row_version, synchro.event_ledger,
        synchro.txn_ledger, synchro.progress CASCADE;
    PERFORM pg_drop_replication_slot(s.slot_name) FROM pg_replication_slots s
    WHERE s.slot_name = slot AND s.database = current_database();
END $$;
-- +goose StatementEnd
