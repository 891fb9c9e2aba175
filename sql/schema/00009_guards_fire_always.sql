-- +goose Up
-- Synchro's truncate and partition guards fire in every session (ENABLE
-- ALWAYS), also where session_replication_role = replica keeps ordinary
-- triggers from firing (a logical replication subscription's apply worker, a
-- restore): pgoutput never sends the TRUNCATE of a single partition, so a
-- partition's guard is all that stops one, and a guard that replica sessions
-- skip let such a TRUNCATE through unseen. Registration and
-- synchro.guard_partitions install them so from now on; this enables the ones
-- installed before. A disabled guard stays disabled (capture blocks on a
-- partition's, synchro.catalog_drift, until synchro.guard_partitions enables it).
-- +goose StatementBegin
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT t.tgrelid::regclass AS rel, t.tgname
             FROM pg_trigger t
             WHERE t.tgname IN ('synchro_truncate_guard', 'synchro_partition_guard') AND t.tgenabled = 'O'
             ORDER BY t.tgrelid, t.tgname
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', g.rel, g.tgname);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT t.tgrelid::regclass AS rel, t.tgname
             FROM pg_trigger t
             WHERE t.tgname IN ('synchro_truncate_guard', 'synchro_partition_guard') AND t.tgenabled = 'A'
             ORDER BY t.tgrelid, t.tgname
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE TRIGGER %I', g.rel, g.tgname);
    END LOOP;
END
$$;
-- +goose StatementEnd
