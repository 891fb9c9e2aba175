-- +goose Up
-- The type and attribute number of each registered column, in the order of
-- synchro.relation.columns. A registered column whose type changes, or that is
-- dropped and added again under its name, is relation drift: its values on the
-- wire would change type, or lose their history, without a row event
-- (docs/change-stream.md, "Registry activation and relation drift"). Relations registered
-- before this migration record the catalog as it is now; a column already
-- missing records NULL, which never matches.
ALTER TABLE synchro.relation
    ADD COLUMN column_types oid[],
    ADD COLUMN column_attnums smallint[];
UPDATE synchro.relation r
SET (column_types, column_attnums) = (
    SELECT array_agg(a.atttypid ORDER BY u.i), array_agg(a.attnum ORDER BY u.i)
    FROM unnest(r.columns) WITH ORDINALITY u(col, i)
    LEFT JOIN pg_attribute a ON a.attrelid = r.relation_oid AND a.attname = u.col AND a.attnum > 0 AND NOT a.attisdropped);
ALTER TABLE synchro.relation
    ALTER COLUMN column_types SET NOT NULL,
    ALTER COLUMN column_attnums SET NOT NULL,
    ADD CHECK (cardinality(column_types) = cardinality(columns) AND cardinality(column_attnums) = cardinality(columns));

-- +goose Down
ALTER TABLE synchro.relation DROP COLUMN column_types CASCADE, DROP COLUMN column_attnums CASCADE;
