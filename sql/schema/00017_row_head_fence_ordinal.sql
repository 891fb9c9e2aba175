-- +goose Up
-- The registered-DML ordinal of each row identity's last fence, beside the
-- transaction and tuple of that fence (fence_xid, fence_ctid). The fence counts
-- ordinals in the transaction-local setting synchro.dml_ordinal, which any writer
-- of a registered table can also set; a setting moved back would give a row's
-- later fence a lower ordinal, and capture would block on the reordered pair
-- (docs/change-stream.md, "Write fences and opaque row versions"). With the ordinal recorded
-- here the fence refuses such a write instead (synchro.fence). Rows fenced
-- before this migration have none; a later transaction never compares with it.
ALTER TABLE synchro.row_head ADD COLUMN fence_ordinal integer;

-- +goose Down
ALTER TABLE synchro.row_head DROP COLUMN fence_ordinal CASCADE;
