-- synchro.scope_cursor: the signed opaque cursor of a scope at a delivery position
-- (stream_generation, point) of ADR 001; point is (commit_lsn, event_ordinal,
-- effect_ordinal), and event and effect ordinal 2147483647 denote the
-- transaction-end sentinel after every effect of the transaction at commit_lsn.
CREATE OR REPLACE FUNCTION synchro.scope_cursor(gen uuid, scope text, lsn pg_lsn, event_ordinal integer, effect_ordinal integer)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT synchro.sign_token('c', ARRAY[gen::text, scope, lsn::text, event_ordinal::text, effect_ordinal::text])
$$;
