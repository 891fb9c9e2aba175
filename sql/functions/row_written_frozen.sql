-- synchro.row_written_frozen: true when the page holding tuple t of relation rel is
-- marked all-frozen in the visibility map. A row the current transaction has just
-- inserted sits on such a page only when it was written frozen (COPY ... FREEZE);
-- an ordinary insert clears the bit. Security definer, because pg_visibility is
-- reserved to privileged roles.
CREATE OR REPLACE FUNCTION synchro.row_written_frozen(rel oid, t tid)
RETURNS boolean
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog
AS $$
    SELECT all_frozen FROM synchro.pg_visibility_map(rel::regclass, ((t::text)::point)[0]::bigint)
$$;
