-- synchro.prune_clients: the retention of push clients and their outcomes,
-- keep = synchro.settings.client_retention (synchro.configure_client_retention;
-- 90 days unless changed, NULL: for good). The worker calls it every prune
-- interval. Removes at most max_rows recorded mutations (push outcomes,
-- synchro.mutation) recorded more than keep ago, oldest first, and at most
-- max_rows clients last seen (synchro.client.last_seen_at, refreshed by their
-- requests) more than keep ago, which are retired: a retired client's requests
-- are refused 409 client_conflict until it connects again, as a new client
-- whose cursors do not resume (it rebuilds). A mutation replayed after its outcome was pruned is
-- applied again, so keep must be longer than any client stays offline with a
-- push it has no answer for. Fences are capture history
-- (synchro.prune_capture_history), never touched here. Returns how many of each
-- it removed; zeros when another session is pruning.
CREATE OR REPLACE FUNCTION synchro.prune_clients(max_rows integer, OUT clients bigint, OUT mutations bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    keep interval := (SELECT s.client_retention FROM synchro.settings s);
BEGIN
    clients := 0;
    mutations := 0;
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'synchro: prune_clients needs a positive row limit' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep IS NULL OR NOT pg_try_advisory_xact_lock(hashtext('synchro.prune_clients')) THEN
        RETURN;
    END IF;
    -- A retired client's mutations are older than its last request, so they go
    -- with the old outcomes; SKIP LOCKED: never wait for a push.
    WITH gone AS (
        DELETE FROM synchro.mutation m
        WHERE (m.client_id, m.mutation_id) IN (
            SELECT x.client_id, x.mutation_id FROM synchro.mutation x
            WHERE x.recorded_at < now() - keep
            ORDER BY x.recorded_at LIMIT max_rows FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*) INTO mutations FROM gone;
    WITH gone AS (
        DELETE FROM synchro.client k
        WHERE k.client_id IN (
            SELECT x.client_id FROM synchro.client x
            WHERE x.last_seen_at < now() - keep
              AND NOT EXISTS (SELECT FROM synchro.mutation m WHERE m.client_id = x.client_id)
            ORDER BY x.last_seen_at LIMIT max_rows FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*) INTO clients FROM gone;
END
$$;
