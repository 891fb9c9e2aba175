-- synchro.pull: POST /sync/pull (docs/protocol.md) for user_id. Fixes one
-- materialized high-watermark hw (transaction_end of the progress row's
-- materialized commit) and serves, for every requested scope assigned to the
-- client whose cursor resumes, the effects after its cursor and at or before hw,
-- merged in (position, scope) order, at most page_limit overall, and of rows of
-- at most page_bytes in all (text of the images) unless the page has one
-- effect: every page that has more has at least one. A scope whose
-- effects were all delivered gets the cursor transaction_end(hw); a cut scope
-- the position of its last delivered effect, so the next page resumes exactly
-- after it (also between effects of one event). The final page (has_more false)
-- carries every served scope's checksum at hw. Requested scopes that are not
-- assigned are listed in scope_updates.remove and never served; assigned scopes
-- not requested in scope_updates.add (cursor null); a cursor that cannot be
-- resumed (synchro.read_scope_cursor: also one issued to another client, or
-- before the scope was last assigned to this one, or behind the retention
-- horizon, synchro.prune_history) puts its scope in rebuild.
-- The capture gate runs first. The page is built in one statement as json
-- text: each row image is rendered once, measured and placed in the answer as
-- it is, with no jsonb built and taken apart again (docs/decisions.md, "Pages
-- as json text").
DROP FUNCTION IF EXISTS synchro.pull(text, jsonb, integer);
DROP FUNCTION IF EXISTS synchro.pull(text, jsonb, integer, bigint);
CREATE FUNCTION synchro.pull(user_id text, request jsonb, page_limit integer, page_bytes bigint)
RETURNS json
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c synchro.client := synchro.client_session(user_id, request, false);
    requested jsonb := coalesce(nullif(request -> 'scopes', 'null'), '{}');
    p synchro.progress;
    hw pg_lsn;
    horizon pg_lsn;
    active jsonb;   -- [{scope, lsn, ev, eff}]: requested, assigned scopes whose cursor resumes
    answer json;
BEGIN
    PERFORM synchro.capture_gate(c.client_id);
    LOOP
        -- The horizon first: it never passes a materialized transaction, so it is
        -- at or before hw.
        horizon := synchro.history_horizon_lsn((SELECT x.stream_generation FROM synchro.progress x));
        SELECT * INTO STRICT p FROM synchro.progress;
        hw := coalesce(p.materialized_commit_lsn, '0/0');

        SELECT coalesce(jsonb_agg(jsonb_build_object('scope', k, 'lsn', x.lsn, 'ev', x.event_ordinal, 'eff', x.effect_ordinal)), '[]')
        INTO active
        FROM jsonb_object_keys(requested) k
        CROSS JOIN LATERAL synchro.read_scope_cursor(requested -> k ->> 'cursor', p.stream_generation, c, k, hw, horizon) x
        WHERE k = ANY (c.scope_set) AND x.lsn IS NOT NULL;

        -- fetched: up to page_limit + 1 effects after the cursors, merged in
        -- (position, scope) order, each with its row image as text; served: the
        -- first ones, within page_limit and page_bytes (at least one).
        WITH a AS MATERIALIZED (
            SELECT * FROM jsonb_to_recordset(active) AS s(scope text, lsn pg_lsn, ev integer, eff integer)),
        fetched AS MATERIALIZED (
            SELECT row_number() OVER (ORDER BY e.commit_lsn, e.event_ordinal, e.effect_ordinal, e.scope COLLATE "C") AS n, e.*
            FROM (SELECT e.scope, e.commit_lsn, e.event_ordinal, e.effect_ordinal, e.table_id, e.key, e.op, e.version
                  FROM a
                  CROSS JOIN LATERAL (SELECT * FROM synchro.effect e
                                      WHERE e.stream_generation = p.stream_generation AND e.scope = a.scope
                                        AND (e.commit_lsn, e.event_ordinal, e.effect_ordinal) > (a.lsn, a.ev, a.eff)
                                        AND e.commit_lsn <= hw
                                      ORDER BY e.commit_lsn, e.event_ordinal, e.effect_ordinal
                                      LIMIT page_limit + 1) e
                  ORDER BY e.commit_lsn, e.event_ordinal, e.effect_ordinal, e.scope COLLATE "C"
                  LIMIT page_limit + 1) e),
        served AS MATERIALIZED (
            SELECT s.* FROM (SELECT f.*, v.img, v.checksum, sum(coalesce(octet_length(v.img), 0)) OVER (ORDER BY f.n) AS upto
                             FROM fetched f
                             LEFT JOIN LATERAL (SELECT v.image::text AS img, v.checksum FROM synchro.row_version v
                                                WHERE f.op = 'upsert' AND v.version = f.version AND v.stream_generation = p.stream_generation) v ON true) s
            WHERE s.n <= page_limit AND (s.n = 1 OR s.upto <= page_bytes)),
        page AS (
            SELECT coalesce(json_agg(CASE WHEN s.op = 'upsert'
                                          THEN json_build_object('scope', s.scope, 'table', t.name, 'op', s.op,
                                                                 'pk', synchro.wire_pk(r.key_column, r.key_type, s.key),
                                                                 'row', s.img::json, 'server_version', s.version, 'row_checksum', s.checksum)
                                          ELSE json_build_object('scope', s.scope, 'table', t.name, 'op', s.op,
                                                                 'pk', synchro.wire_pk(r.key_column, r.key_type, s.key)) END
                                     ORDER BY s.n), '[]') AS changes,
                   (SELECT count(*) FROM fetched) > count(*) AS has_more
            FROM served s
            JOIN synchro.synced_table t ON t.table_id = s.table_id
            JOIN synchro.relation r ON r.relation_id = t.relation_id),
        -- A scope is done when no effect after its last delivered one is left at
        -- or before hw; only a page that had more can leave one. A cut scope
        -- resumes after its last delivered effect (or where it was).
        cursors AS (
            SELECT coalesce(json_object_agg(a.scope,
                       CASE WHEN pg.has_more AND EXISTS (
                                SELECT FROM synchro.effect e
                                WHERE e.stream_generation = p.stream_generation AND e.scope = a.scope AND e.commit_lsn <= hw
                                  AND (e.commit_lsn, e.event_ordinal, e.effect_ordinal) > (l.lsn, l.ev, l.eff))
                            THEN synchro.scope_cursor(p.stream_generation, c, a.scope, l.lsn, l.ev, l.eff)
                            ELSE synchro.scope_cursor(p.stream_generation, c, a.scope, hw, 2147483647, 2147483647) END), '{}') AS cursors
            FROM a
            CROSS JOIN page pg
            CROSS JOIN LATERAL (SELECT coalesce(d.commit_lsn, a.lsn) AS lsn, coalesce(d.event_ordinal, a.ev) AS ev,
                                       coalesce(d.effect_ordinal, a.eff) AS eff
                                FROM (SELECT NULL) one
                                LEFT JOIN LATERAL (SELECT d.commit_lsn, d.event_ordinal, d.effect_ordinal FROM served d
                                                   WHERE d.scope = a.scope ORDER BY d.n DESC LIMIT 1) d ON true) l),
        rest AS (
            SELECT synchro.scope_diff(c.scope_set, requested) AS scope_updates,
                   coalesce((SELECT jsonb_agg(k ORDER BY k COLLATE "C")
                             FROM jsonb_object_keys(requested) k
                             WHERE k = ANY (c.scope_set) AND NOT EXISTS (SELECT FROM a WHERE a.scope = k)), '[]') AS rebuild)
        SELECT CASE WHEN pg.has_more
                    THEN json_build_object('changes', pg.changes, 'scope_cursors', cu.cursors, 'scope_set_version', c.scope_set_version,
                                           'scope_updates', r.scope_updates, 'rebuild', r.rebuild, 'has_more', true)
                    ELSE json_build_object('changes', pg.changes, 'scope_cursors', cu.cursors, 'scope_set_version', c.scope_set_version,
                                           'scope_updates', r.scope_updates, 'rebuild', r.rebuild, 'has_more', false,
                                           'checksums', coalesce((SELECT json_object_agg(a.scope, synchro.scope_checksum(p.stream_generation, a.scope, hw))
                                                                  FROM a), '{}')) END
        INTO answer
        FROM page pg, cursors cu, rest r;
        -- Pruning moves the horizon and removes the history behind it in one
        -- transaction: if this page could have missed a removed row, the horizon
        -- it finds now has moved, and the page is made again (the cursors the
        -- horizon overtook go in rebuild).
        EXIT WHEN synchro.history_horizon_lsn(p.stream_generation) = horizon;
    END LOOP;
    RETURN answer;
END
$$;
