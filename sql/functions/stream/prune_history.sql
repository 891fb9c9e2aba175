-- synchro.prune_history: one bounded batch of the pull history's retention for
-- the active stream generation. It advances the generation's horizon
-- (synchro.history_horizon) over the next materialized transactions, oldest
-- first, that were materialized more than keep ago, at most max_events applied
-- events of them (always at least one transaction), and in the same
-- transaction removes what no position at or after transaction_end(horizon)
-- needs: the effects of those transactions, every row version superseded by a
-- later version at or before the horizon (and a deletion's version that is
-- its row's latest at or before it: a deleted row is in no scope), the
-- membership edges closed at or before it, and every scope digest superseded
-- by a later one at or before it. What pull and rebuild read at or after the
-- horizon is untouched: the latest version, edge and digest at any such
-- position stay. It never touches a row materialization writes (open edges,
-- the progress row), so it never waits for a batch; lock_timeout bounds any
-- other wait (the batch fails and the next round retries it). A crash rolls a
-- batch back whole. Statistics of the pruning round that began at round_start
-- (the caller's clock) accumulate in the horizon's row. Returns the horizon,
-- how many transactions it passed and what the batch removed; zeros and the
-- horizon unchanged when nothing is old enough or another session is pruning.
DROP FUNCTION IF EXISTS synchro.prune_history(interval, integer, timestamptz);
CREATE FUNCTION synchro.prune_history(keep interval, max_events integer, round_start timestamptz,
    OUT horizon pg_lsn, OUT transactions bigint, OUT effects bigint, OUT versions bigint, OUT edges bigint, OUT digests bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '2s'
AS $$
DECLARE
    gen uuid;
    was pg_lsn;
    upto pg_lsn;
BEGIN
    transactions := 0;
    effects := 0;
    versions := 0;
    edges := 0;
    digests := 0;
    IF keep IS NULL OR keep < interval '0' OR max_events IS NULL OR max_events < 1 OR round_start IS NULL THEN
        RAISE EXCEPTION 'synchro: prune_history needs a retention of zero or more, a positive event limit and a round start'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    gen := (SELECT p.stream_generation FROM synchro.progress p);
    IF gen IS NULL THEN
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('synchro.prune_history')) THEN
        horizon := synchro.history_horizon_lsn(gen);
        RETURN;
    END IF;
    was := synchro.history_horizon_lsn(gen);
    horizon := was;

    -- The next transactions after the horizon while each is old enough, up to
    -- max_events applied events (the first one whatever its size).
    SELECT count(*), max(x.commit_lsn) INTO transactions, upto
    FROM (SELECT l.commit_lsn,
                 bool_and(now() - l.materialized_at > keep) OVER w AS old,
                 sum(l.applied_count) OVER w AS events,
                 row_number() OVER w AS n
          FROM (SELECT l.commit_lsn, l.materialized_at, l.applied_count FROM synchro.txn_ledger l
                WHERE l.stream_generation = gen AND l.commit_lsn > was
                ORDER BY l.commit_lsn
                LIMIT max_events) l
          WINDOW w AS (ORDER BY l.commit_lsn)) x
    WHERE x.old AND (x.n = 1 OR x.events <= max_events);
    IF upto IS NULL THEN
        RETURN;
    END IF;
    horizon := upto;

    DELETE FROM synchro.effect e
    WHERE e.stream_generation = gen AND e.commit_lsn <= upto;
    GET DIAGNOSTICS effects = ROW_COUNT;

    -- Rows with a version after the old horizon: their versions before their
    -- latest one at or before the new horizon go, and that one too when it is
    -- a deletion.
    WITH latest AS (
        SELECT l.*
        FROM (SELECT DISTINCT v.table_id, v.key FROM synchro.row_version v
              WHERE v.stream_generation = gen AND v.commit_lsn > was AND v.commit_lsn <= upto) c
        CROSS JOIN LATERAL (SELECT v.table_id, v.key, v.commit_lsn, v.event_ordinal, v.image IS NULL AS deleted
                            FROM synchro.row_version v
                            WHERE v.table_id = c.table_id AND v.key = c.key AND v.stream_generation = gen
                              AND v.commit_lsn <= upto
                            ORDER BY v.commit_lsn DESC, v.event_ordinal DESC LIMIT 1) l)
    DELETE FROM synchro.row_version v USING latest l
    WHERE v.table_id = l.table_id AND v.key = l.key AND v.stream_generation = gen AND v.commit_lsn <= upto
      AND ((v.commit_lsn, v.event_ordinal) < (l.commit_lsn, l.event_ordinal) OR l.deleted);
    GET DIAGNOSTICS versions = ROW_COUNT;

    DELETE FROM synchro.membership m
    WHERE m.stream_generation = gen AND m.to_lsn IS NOT NULL AND m.to_lsn <= upto;
    GET DIAGNOSTICS edges = ROW_COUNT;

    WITH latest AS (
        SELECT s.scope, (SELECT max(d.commit_lsn) FROM synchro.scope_digest d
                         WHERE d.stream_generation = gen AND d.scope = s.scope AND d.commit_lsn <= upto) AS commit_lsn
        FROM (SELECT DISTINCT d.scope FROM synchro.scope_digest d
              WHERE d.stream_generation = gen AND d.commit_lsn > was AND d.commit_lsn <= upto) s)
    DELETE FROM synchro.scope_digest d USING latest l
    WHERE d.stream_generation = gen AND d.scope = l.scope AND d.commit_lsn < l.commit_lsn;
    GET DIAGNOSTICS digests = ROW_COUNT;

    INSERT INTO synchro.history_horizon AS h (stream_generation, horizon_lsn, round_started_at, round_ended_at,
                                              round_effects, round_versions, round_edges, round_digests)
    VALUES (gen, upto, round_start, clock_timestamp(), effects, versions, edges, digests)
    ON CONFLICT (stream_generation) DO UPDATE
    SET horizon_lsn = EXCLUDED.horizon_lsn, advanced_at = now(), round_started_at = EXCLUDED.round_started_at,
        round_ended_at = EXCLUDED.round_ended_at,
        round_effects = EXCLUDED.round_effects + CASE WHEN h.round_started_at = EXCLUDED.round_started_at THEN h.round_effects ELSE 0 END,
        round_versions = EXCLUDED.round_versions + CASE WHEN h.round_started_at = EXCLUDED.round_started_at THEN h.round_versions ELSE 0 END,
        round_edges = EXCLUDED.round_edges + CASE WHEN h.round_started_at = EXCLUDED.round_started_at THEN h.round_edges ELSE 0 END,
        round_digests = EXCLUDED.round_digests + CASE WHEN h.round_started_at = EXCLUDED.round_started_at THEN h.round_digests ELSE 0 END;
END
$$;
