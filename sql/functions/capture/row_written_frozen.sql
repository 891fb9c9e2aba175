-- synchro.row_written_frozen: true when the page holding tuple t of relation rel is
-- marked all-frozen in the visibility map. A row the current transaction has just
-- inserted sits on such a page only when it was written frozen (COPY ... FREEZE);
-- an ordinary insert clears the bit. Called by synchro.fence (a security definer,
-- so it runs with the rights pg_visibility needs). PL/pgSQL, so that its query is
-- planned once per session: a SQL function called from PL/pgSQL is parsed and
-- planned again in every transaction, which cost a one-row writing transaction
-- tens of microseconds. No SET clause (it would cost every fence a configuration
-- change); every name is schema-qualified.
CREATE OR REPLACE FUNCTION synchro.row_written_frozen(rel oid, t tid)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT v.all_frozen
            FROM synchro.pg_visibility_map(rel::pg_catalog.regclass,
                                           ((t::pg_catalog.text)::pg_catalog.point)[0]::pg_catalog.int8) v);
END
$$;
