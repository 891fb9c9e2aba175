-- synchro.row_written_frozen: true when the page holding tuple t of relation rel is
-- marked all-frozen in the visibility map. A row the current transaction has just
-- inserted sits on such a page only when it was written frozen (COPY ... FREEZE);
-- an ordinary insert clears the bit. Called by synchro.fence (a security definer,
-- so it runs with the rights pg_visibility needs); plain SQL with qualified names
-- and no SET clause, so that it is inlined into the fence.
CREATE OR REPLACE FUNCTION synchro.row_written_frozen(rel oid, t tid)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT all_frozen FROM synchro.pg_visibility_map(rel::regclass, ((t::text)::pg_catalog.point)[0]::bigint)
$$;
