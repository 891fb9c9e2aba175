-- synchro.max_scope_bytes: the longest scope id (bytes) a row pushed through the
-- sync API may belong to. Materialization stores a row's scope beside its key in
-- btree indexes (synchro.membership: scope and key, at most
-- synchro.max_key_bytes, together must fit the index entry limit of about
-- 2.7kB); a longer scope would fail materialization and block the stream for
-- every client, so push rejects the mutation up front (validation_failed).
CREATE OR REPLACE FUNCTION synchro.max_scope_bytes()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1500 $$;
