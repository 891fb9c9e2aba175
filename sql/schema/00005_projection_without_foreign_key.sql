-- +goose Up
-- Materialization writes a projection row for every captured row change, and a
-- foreign key on projection.relation_id cost a referential check (a lookup and a
-- key-share row lock on synchro.relation) per row. Relations are never deleted
-- (a dropped or changed relation keeps its row and is quarantined as drift), so
-- the key never refused anything; materialization writes only relation ids that
-- the registry gave the worker.
ALTER TABLE synchro.projection DROP CONSTRAINT projection_relation_id_fkey;

-- +goose Down
ALTER TABLE synchro.projection
    ADD CONSTRAINT projection_relation_id_fkey FOREIGN KEY (relation_id) REFERENCES synchro.relation;
