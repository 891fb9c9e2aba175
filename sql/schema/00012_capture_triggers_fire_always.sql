-- +goose Up
-- The key guard and the fence fire in every session (ENABLE ALWAYS), as the
-- truncate and partition guards do since 00009: rows that a logical
-- replication subscription's apply worker writes (session_replication_role =
-- replica, where ordinary triggers do not fire) had no fence, and the first
-- one blocked capture as an unmatched row event. Registration installs them so
-- from now on; this converts the ones installed before, on registered
-- relations and their partitions. A disabled trigger stays disabled
-- (readiness reports it). Down restores ordinary firing.
-- +goose StatementBegin
DO $$ BEGIN
    EXECUTE coalesce((SELECT string_agg(format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', t.tgrelid::regclass, t.tgname), '; ')
                      FROM pg_trigger t WHERE t.tgname IN ('synchro_key_guard', 'synchro_fence') AND t.tgenabled = 'O'), '');
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$ BEGIN
    EXECUTE coalesce((SELECT string_agg(format('ALTER TABLE %s ENABLE TRIGGER %I', t.tgrelid::regclass, t.tgname), '; ')
                      FROM pg_trigger t WHERE t.tgname IN ('synchro_key_guard', 'synchro_fence') AND t.tgenabled = 'A'), '');
END $$;
-- +goose StatementEnd
