-- +goose Up
-- The label of each enum value a registered column's enum type had when it was
-- recorded (pg_enum.oid identifies the value). ALTER TYPE ... RENAME VALUE
-- changes the text of every row holding the value without a row event, so
-- projections and clients would keep the old label: a recorded value whose
-- label changed is catalog drift (synchro.catalog_drift) until
-- synchro.accept_rewrite records it again. Registration records the values its
-- columns' types have; the worker records values added later
-- (synchro.record_enum_labels) at each catalog check, which also records those
-- of relations registered before this migration.
CREATE TABLE synchro.relation_enum_label (
    relation_id bigint NOT NULL REFERENCES synchro.relation (relation_id),
    enum_value oid NOT NULL,
    enum_type oid NOT NULL,
    label name NOT NULL,
    PRIMARY KEY (relation_id, enum_value)
);

-- +goose Down
DROP TABLE synchro.relation_enum_label CASCADE;
