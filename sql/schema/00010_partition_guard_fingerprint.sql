-- +goose Up
-- Each recorded partition keeps the fingerprint of its two guard triggers
-- (name, oid and the xmin of their pg_trigger rows), as synchro.guard_partitions
-- last saw them. A guard disabled and enabled again, or dropped and created
-- again, fires in every session afterwards like before, but a TRUNCATE of the
-- partition (which pgoutput never sends) or a write into it while it was
-- detached may have gone through in between: the changed fingerprint is
-- catalog drift (synchro.catalog_drift) until synchro.guard_partitions records
-- it again, which attests that nothing went through. This migration records
-- the guards as they are (the same expression as synchro.partition_guards,
-- which the function bundle installs after the migrations).
ALTER TABLE synchro.relation_partition ADD COLUMN guards text;
UPDATE synchro.relation_partition rp
SET guards = (SELECT string_agg(format('%s:%s:%s', tg.tgname, tg.oid, tg.xmin), ',' ORDER BY tg.tgname)
              FROM pg_trigger tg
              WHERE tg.tgrelid = rp.partition_oid AND tg.tgname IN ('synchro_truncate_guard', 'synchro_partition_guard'));

-- +goose Down
ALTER TABLE synchro.relation_partition DROP COLUMN guards CASCADE;
