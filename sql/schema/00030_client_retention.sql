-- +goose Up
-- Retention of clients and push outcomes (synchro.prune_clients, run by the
-- worker): a client not seen for client_retention is retired with its recorded
-- mutations, and outcomes older than it are pruned for every client; NULL keeps
-- them for good. The indexes find both oldest first without reading the tables
-- whole.
ALTER TABLE synchro.settings ADD COLUMN client_retention interval DEFAULT interval '90 days'
    CHECK (client_retention >= interval '0');
CREATE INDEX client_last_seen ON synchro.client (last_seen_at);
CREATE INDEX mutation_recorded ON synchro.mutation (recorded_at);

-- +goose Down
DROP INDEX synchro.mutation_recorded;
DROP INDEX synchro.client_last_seen;
ALTER TABLE synchro.settings DROP COLUMN client_retention CASCADE;
