-- synchro.max_key_bytes: the longest primary-key value (bytes of its text) a
-- registered row may have. A key is stored in several btree indexes, one of them
-- beside a scope id (synchro.membership: key and scope together must fit the
-- index entry limit of about 2.7kB); a longer key would fail materialization and
-- block the stream, so the fence refuses the write up front (54000) and push
-- rejects the mutation (validation_failed).
CREATE OR REPLACE FUNCTION synchro.max_key_bytes()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1024 $$;
