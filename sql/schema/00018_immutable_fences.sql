-- +goose Up
-- Write fences are immutable (docs/change-stream.md, "Write fences and opaque row versions":
-- push "persists an immutable write fence"). A fence is materialized when the
-- event ledger holds the row event reconciled with it, and at most once: the
-- ledger names each fence once (event_ledger_fence). Materialization used to
-- mark each fence by updating it, a second heap tuple and index entry per
-- captured row (and more WAL for the slot to decode).
-- The capture gate asks whether a client has an accepted push fence not yet
-- materialized: synchro.fence_pending holds a push's fences (those bound to a
-- client) from the push until the materialization that reconciles them.
CREATE UNIQUE INDEX event_ledger_fence ON synchro.event_ledger (fence_id);

CREATE TABLE synchro.fence_pending (
    fence_id  uuid PRIMARY KEY,
    client_id text NOT NULL
);
INSERT INTO synchro.fence_pending (fence_id, client_id)
SELECT f.fence_id, f.client_id FROM synchro.fence f WHERE f.client_id IS NOT NULL AND f.materialized_lsn IS NULL;
DROP INDEX synchro.fence_pending_by_client;
CREATE INDEX fence_pending_by_client ON synchro.fence_pending (client_id);
ALTER TABLE synchro.fence DROP COLUMN materialized_lsn;

-- +goose Down
ALTER TABLE synchro.fence ADD COLUMN materialized_lsn pg_lsn;
UPDATE synchro.fence f SET materialized_lsn = e.commit_lsn FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id;
DROP TABLE synchro.fence_pending CASCADE;
CREATE INDEX fence_pending_by_client ON synchro.fence (client_id)
    WHERE client_id IS NOT NULL AND materialized_lsn IS NULL;
DROP INDEX synchro.event_ledger_fence;
