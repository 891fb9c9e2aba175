-- synchro.scope_cursor: the signed opaque cursor of a scope at a delivery position
-- (stream_generation, point) of docs/change-stream.md; point is (commit_lsn, event_ordinal,
-- effect_ordinal), and event and effect ordinal 2147483647 denote the
-- transaction-end sentinel after every effect of the transaction at commit_lsn.
-- It is bound to client c and to the scope's current assignment epoch in c
-- (synchro.scope_token), so only synchro.read_scope_cursor for the same client,
-- with the scope assigned ever since, resumes it.
DROP FUNCTION IF EXISTS synchro.scope_cursor(uuid, text, pg_lsn, integer, integer);
CREATE OR REPLACE FUNCTION synchro.scope_cursor(gen uuid, c synchro.client, scope text, lsn pg_lsn,
                                               event_ordinal integer, effect_ordinal integer)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT synchro.scope_token('c', gen, c, scope, ARRAY[lsn::text, event_ordinal::text, effect_ordinal::text])
$$;
