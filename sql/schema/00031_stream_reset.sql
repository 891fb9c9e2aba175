-- +goose Up
-- Stream reset (docs/change-stream.md, "Stream reset"): a new stream generation
-- built from a causally bound baseline. The derived state of a generation
-- (projections, row versions, membership edges, effects, scope digests and the
-- replay ledgers) is keyed by its stream generation, so that a reset stages the
-- target generation's state beside the active one without touching it, and
-- activation switches the generation that synchro.progress names.

-- Projections and row versions were the only derived state not keyed by
-- generation. A row's version string is its last fence's, so a staged baseline
-- holds the same version as the old generation for a row that did not change.
ALTER TABLE synchro.projection ADD COLUMN stream_generation uuid;
UPDATE synchro.projection SET stream_generation = (SELECT p.stream_generation FROM synchro.progress p);
ALTER TABLE synchro.projection ALTER COLUMN stream_generation SET NOT NULL,
    DROP CONSTRAINT projection_pkey,
    ADD PRIMARY KEY (relation_id, key, stream_generation);
ALTER TABLE synchro.row_version DROP CONSTRAINT row_version_pkey,
    ADD PRIMARY KEY (version, stream_generation);

-- One stream reset: its candidate slot and the positions that bind its
-- baseline, its phase, and the staged stream's progress (the positions
-- synchro.progress holds for the active stream). Phases: staging (the
-- candidate slot may exist; no baseline committed), catching_up (baseline
-- committed; the candidate slot is consumed into the staged generation),
-- ready (the barrier is materialized and the stage verified), activated,
-- retired, aborted.
CREATE TABLE synchro.stream_reset (
    reset_id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    reason                  text NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    phase                   text NOT NULL DEFAULT 'staging'
                            CHECK (phase IN ('staging', 'catching_up', 'ready', 'activated', 'retired', 'aborted')),
    database_name           name NOT NULL DEFAULT current_database(),
    plugin                  text NOT NULL DEFAULT 'pgoutput',
    candidate_slot          name NOT NULL UNIQUE,
    source_generation       uuid NOT NULL,
    source_slot             name NOT NULL,
    -- The old stream's materialized high-watermark when the reset began: the old
    -- stream stays blocked while it is unchanged.
    source_commit_lsn       pg_lsn,
    target_generation       uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    consistent_point        pg_lsn,
    snapshot_name           text,
    -- The baseline's position in the target generation: just before the
    -- consistent point, so that every decoded transaction comes after it.
    baseline_lsn            pg_lsn,
    -- The barrier: a transaction the coordinator commits after the baseline,
    -- carrying a transactional message; its xid is recorded with it, and its
    -- positions once the staged catch-up materialized it.
    barrier_xid             xid8,
    barrier_snapshot        pg_snapshot,
    barrier_commit_lsn      pg_lsn,
    barrier_end_lsn         pg_lsn,
    -- The staged stream's progress.
    registry_generation     bigint,
    materialized_commit_lsn pg_lsn,
    materialized_end_lsn    pg_lsn,
    materialized_commit_time timestamptz,
    processed_end_lsn       pg_lsn,
    acknowledged_end_lsn    pg_lsn,
    -- Counters.
    relations_staged        integer NOT NULL DEFAULT 0,
    rows_staged             bigint NOT NULL DEFAULT 0,
    fences_covered          bigint NOT NULL DEFAULT 0,
    txns_caught_up          bigint NOT NULL DEFAULT 0,
    verified_at             timestamptz,
    verification            jsonb,
    retirement              jsonb,
    started_by              name NOT NULL DEFAULT session_user,
    activated_by            name,
    retired_by              name,
    aborted_by              name,
    started_at              timestamptz NOT NULL DEFAULT now(),
    phase_at                timestamptz NOT NULL DEFAULT now(),
    baseline_at             timestamptz,
    activated_at            timestamptz,
    retired_at              timestamptz,
    aborted_at              timestamptz,
    CHECK (phase IN ('staging', 'aborted') OR baseline_lsn IS NOT NULL),
    CHECK (phase NOT IN ('ready', 'activated', 'retired') OR (barrier_end_lsn IS NOT NULL AND verified_at IS NOT NULL))
);
-- One reset at a time per database: at most one that is not yet activated,
-- retired or aborted.
CREATE UNIQUE INDEX stream_reset_one ON synchro.stream_reset ((true)) WHERE phase IN ('staging', 'catching_up', 'ready');

-- reset_baseline coverage: every accepted fence visible in a reset's baseline
-- snapshot, bound to the reset, its candidate slot, the snapshot boundary and
-- the target generation. Immutable; it clears the capture gate only once its
-- reset is activated.
CREATE TABLE synchro.reset_coverage (
    reset_id          uuid NOT NULL, -- no foreign key: a check per covered fence cost more than the insert
    fence_id          uuid NOT NULL,
    candidate_slot    name NOT NULL,
    consistent_point  pg_lsn NOT NULL,
    target_generation uuid NOT NULL,
    PRIMARY KEY (fence_id, reset_id)
);
CREATE INDEX reset_coverage_reset ON synchro.reset_coverage (reset_id);

-- +goose StatementBegin
CREATE FUNCTION synchro.reset_coverage_immutable() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'synchro: reset_baseline coverage records are immutable'
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;
-- +goose StatementEnd
CREATE TRIGGER reset_coverage_immutable BEFORE UPDATE ON synchro.reset_coverage
    FOR EACH ROW EXECUTE FUNCTION synchro.reset_coverage_immutable();

-- +goose Down
DROP TABLE synchro.reset_coverage;
DROP FUNCTION synchro.reset_coverage_immutable();
DROP TABLE synchro.stream_reset CASCADE;
DELETE FROM synchro.row_version v USING synchro.progress p WHERE v.stream_generation <> p.stream_generation;
DELETE FROM synchro.projection j USING synchro.progress p WHERE j.stream_generation <> p.stream_generation;
ALTER TABLE synchro.row_version DROP CONSTRAINT row_version_pkey, ADD PRIMARY KEY (version);
ALTER TABLE synchro.projection DROP CONSTRAINT projection_pkey, ADD PRIMARY KEY (relation_id, key);
ALTER TABLE synchro.projection DROP COLUMN stream_generation CASCADE;
