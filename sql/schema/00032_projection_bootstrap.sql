-- +goose Up
-- Projection bootstrap (docs/change-stream.md, "Projection bootstrap"): a
-- relation registered while it holds rows is captured from its registering
-- transaction on, but served only once a bootstrap staged its rows from a
-- causally bound baseline and the capture worker activated them at the
-- bootstrap's barrier, in source order, in the active stream generation.

-- A bootstrap is a stream_reset row of kind 'bootstrap': the same candidate
-- slot, exported snapshot, baseline, staged catch-up and barrier, staging only
-- relation_ids (into the stage generation, target_generation), activated by
-- the capture worker, never changing the active stream generation.
ALTER TABLE synchro.stream_reset
    ADD COLUMN kind text NOT NULL DEFAULT 'reset' CHECK (kind IN ('reset', 'bootstrap')),
    ADD COLUMN relation_ids bigint[],
    ADD CHECK ((kind = 'bootstrap') = (relation_ids IS NOT NULL)),
    -- A bootstrap may be recorded before the first stream starts.
    ALTER COLUMN source_generation DROP NOT NULL,
    ALTER COLUMN source_slot DROP NOT NULL,
    ADD CHECK (kind = 'bootstrap' OR (source_generation IS NOT NULL AND source_slot IS NOT NULL));

-- A registry change with nothing to stage (a rule or option change over
-- columns already captured, an unregistration: relation_ids empty) is ready
-- when recorded and activated at its own transaction; registration is the
-- change the activation applies ({"op": "register" | "reconfigure" |
-- "unregister", ...}, synchro.activate_bootstrap).
ALTER TABLE synchro.stream_reset
    ADD COLUMN registration jsonb NOT NULL DEFAULT '{"op": "register"}',
    DROP CONSTRAINT stream_reset_check,
    DROP CONSTRAINT stream_reset_check1,
    ADD CONSTRAINT stream_reset_baselined
        CHECK (phase IN ('staging', 'aborted') OR baseline_lsn IS NOT NULL OR relation_ids = '{}'),
    ADD CONSTRAINT stream_reset_verified
        CHECK (phase NOT IN ('ready', 'activated', 'retired') OR (barrier_end_lsn IS NOT NULL AND verified_at IS NOT NULL)
               OR relation_ids = '{}');

-- A registration waiting for its bootstrap: captured (triggers, publication,
-- fences) but not served (not in the schema manifest, pushes answered retry),
-- its row events held out of the active stream's materialization until the
-- bootstrap's activation.
ALTER TABLE synchro.relation ADD COLUMN bootstrap_pending boolean NOT NULL DEFAULT false;

-- Scope floors: a scope cursor of the stream generation issued before a
-- scope's floor cannot be resumed (its scope is rebuilt): a bootstrap's
-- activation gives the scopes it adds rows to a floor at its barrier.
CREATE TABLE synchro.scope_floor (
    stream_generation uuid NOT NULL,
    scope             text NOT NULL,
    floor_lsn         pg_lsn NOT NULL,
    PRIMARY KEY (stream_generation, scope)
);

-- A fence is materialized at most once per stream generation: a
-- reconfiguration's stage materializes the events of a table the active
-- stream keeps serving.
DROP INDEX synchro.event_ledger_fence;
CREATE UNIQUE INDEX event_ledger_fence ON synchro.event_ledger (fence_id, stream_generation);

-- +goose Down
DROP INDEX synchro.event_ledger_fence;
DELETE FROM synchro.event_ledger l USING synchro.progress p WHERE l.stream_generation <> p.stream_generation;
CREATE UNIQUE INDEX event_ledger_fence ON synchro.event_ledger (fence_id);
DROP TABLE synchro.scope_floor;
ALTER TABLE synchro.relation DROP COLUMN bootstrap_pending CASCADE;
DELETE FROM synchro.stream_reset WHERE kind = 'bootstrap';
ALTER TABLE synchro.stream_reset DROP CONSTRAINT stream_reset_baselined, DROP CONSTRAINT stream_reset_verified,
    ADD CHECK (phase IN ('staging', 'aborted') OR baseline_lsn IS NOT NULL),
    ADD CHECK (phase NOT IN ('ready', 'activated', 'retired') OR (barrier_end_lsn IS NOT NULL AND verified_at IS NOT NULL)),
    DROP COLUMN registration CASCADE;
ALTER TABLE synchro.stream_reset DROP COLUMN relation_ids CASCADE, DROP COLUMN kind CASCADE,
    ALTER COLUMN source_generation SET NOT NULL, ALTER COLUMN source_slot SET NOT NULL;
