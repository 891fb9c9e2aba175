-- +goose Up
-- A mutation_id names one mutation of its client: the digest of what it asked
-- (table, op, pk, columns, base_version) is recorded with its outcome, so that
-- a later mutation sent under the same id with other contents is refused
-- instead of being answered with the first one's outcome and never applied.
-- Outcomes recorded before this migration have no digest and replay as before.
ALTER TABLE synchro.mutation ADD COLUMN digest text;

-- +goose Down
ALTER TABLE synchro.mutation DROP COLUMN digest CASCADE;
