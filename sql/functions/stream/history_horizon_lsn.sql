-- synchro.history_horizon_lsn: the retention horizon of stream generation gen
-- (synchro.history_horizon), '0/0' when nothing of it was pruned. History at
-- or before it may be gone: a scope cursor before transaction_end(horizon)
-- cannot be resumed, a rebuild session before it cannot go on.
CREATE OR REPLACE FUNCTION synchro.history_horizon_lsn(gen uuid)
RETURNS pg_lsn
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT h.horizon_lsn FROM synchro.history_horizon h WHERE h.stream_generation = gen), '0/0')
$$;
