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
-- before the scope was last assigned to this one) puts its scope in rebuild.
-- The capture gate runs first.
DROP FUNCTION IF EXISTS synchro.pull(text, jsonb, integer);
CREATE OR REPLACE FUNCTION synchro.pull(user_id text, request jsonb, page_limit integer, page_bytes bigint)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c synchro.client := synchro.client_session(user_id, request, false);
    requested jsonb := coalesce(nullif(request -> 'scopes', 'null'), '{}');
    p synchro.progress;
    hw pg_lsn;
    active jsonb;   -- [{scope, lsn, ev, eff}]: requested, assigned scopes whose cursor resumes
    fetched jsonb;  -- [{n, scope, lsn, ev, eff, table_id, key, op, version}]: up to page_limit + 1 effects
    has_more boolean;
    served integer; -- the effects of this page: the first ones of fetched
    cursors jsonb;
    page jsonb;
BEGIN
    PERFORM synchro.capture_gate(c.client_id);
    SELECT * INTO STRICT p FROM synchro.progress;
    hw := coalesce(p.materialized_commit_lsn, '0/0');

    SELECT coalesce(jsonb_agg(jsonb_build_object('scope', k, 'lsn', x.lsn, 'ev', x.event_ordinal, 'eff', x.effect_ordinal)), '[]')
    INTO active
    FROM jsonb_object_keys(requested) k
    CROSS JOIN LATERAL synchro.read_scope_cursor(requested -> k ->> 'cursor', p.stream_generation, c, k, hw) x
    WHERE k = ANY (c.scope_set) AND x.lsn IS NOT NULL;

    SELECT coalesce(jsonb_agg(to_jsonb(e) ORDER BY e.n), '[]')
    INTO fetched
    FROM (SELECT row_number() OVER (ORDER BY e.commit_lsn, e.event_ordinal, e.effect_ordinal, e.scope COLLATE "C") AS n,
                 e.scope, e.commit_lsn AS lsn, e.event_ordinal AS ev, e.effect_ordinal AS eff, e.table_id, e.key, e.op, e.version
          FROM (SELECT e.*
                FROM jsonb_to_recordset(active) AS s(scope text, lsn pg_lsn, ev integer, eff integer)
                CROSS JOIN LATERAL (SELECT * FROM synchro.effect e
                                    WHERE e.stream_generation = p.stream_generation AND e.scope = s.scope
                                      AND (e.commit_lsn, e.event_ordinal, e.effect_ordinal) > (s.lsn, s.ev, s.eff)
                                      AND e.commit_lsn <= hw
                                    ORDER BY e.commit_lsn, e.event_ordinal, e.effect_ordinal
                                    LIMIT page_limit + 1) e
                ORDER BY e.commit_lsn, e.event_ordinal, e.effect_ordinal, e.scope COLLATE "C"
                LIMIT page_limit + 1) e) e;
    SELECT count(*) INTO served
    FROM (SELECT e.n, sum(coalesce(octet_length(v.image::text), 0)) OVER (ORDER BY e.n) AS upto
          FROM jsonb_to_recordset(fetched) AS e(n integer, op text, version text)
          LEFT JOIN synchro.row_version v ON e.op = 'upsert' AND v.version = e.version AND v.stream_generation = p.stream_generation) s
    WHERE s.n <= page_limit AND (s.n = 1 OR s.upto <= page_bytes);
    has_more := jsonb_array_length(fetched) > served;

    SELECT coalesce(jsonb_agg(
               jsonb_build_object('scope', e.scope, 'table', t.name, 'op', e.op,
                                  'pk', synchro.wire_pk(r.key_column, r.key_type, e.key))
               || CASE WHEN e.op = 'upsert'
                       THEN jsonb_build_object('row', v.image, 'server_version', v.version, 'row_checksum', v.checksum)
                       ELSE '{}' END
               ORDER BY e.n), '[]')
    INTO page
    FROM jsonb_to_recordset(fetched) AS e(n integer, scope text, table_id integer, key text, op text, version text)
    JOIN synchro.synced_table t ON t.table_id = e.table_id
    JOIN synchro.relation r ON r.relation_id = t.relation_id
    LEFT JOIN synchro.row_version v ON v.version = e.version AND v.stream_generation = p.stream_generation
    WHERE e.n <= served;

    -- A scope is done when no effect after its last delivered one is left at or
    -- before hw; only a page that had more can leave one. A cut scope resumes
    -- after its last delivered effect (or where it was).
    SELECT coalesce(jsonb_object_agg(s.scope,
               CASE WHEN has_more AND EXISTS (
                        SELECT FROM synchro.effect e
                        WHERE e.stream_generation = p.stream_generation AND e.scope = s.scope AND e.commit_lsn <= hw
                          AND (e.commit_lsn, e.event_ordinal, e.effect_ordinal) > (l.lsn, l.ev, l.eff))
                    THEN synchro.scope_cursor(p.stream_generation, c, s.scope, l.lsn, l.ev, l.eff)
                    ELSE synchro.scope_cursor(p.stream_generation, c, s.scope, hw, 2147483647, 2147483647) END), '{}')
    INTO cursors
    FROM jsonb_to_recordset(active) AS s(scope text, lsn pg_lsn, ev integer, eff integer)
    CROSS JOIN LATERAL (SELECT coalesce(d.lsn, s.lsn) AS lsn, coalesce(d.ev, s.ev) AS ev, coalesce(d.eff, s.eff) AS eff
                        FROM (SELECT NULL) one
                        LEFT JOIN LATERAL (SELECT d.lsn, d.ev, d.eff
                                           FROM jsonb_to_recordset(fetched) AS d(n integer, scope text, lsn pg_lsn, ev integer, eff integer)
                                           WHERE d.scope = s.scope AND d.n <= served
                                           ORDER BY d.n DESC LIMIT 1) d ON true) l;

    RETURN jsonb_build_object(
        'changes', page,
        'scope_cursors', cursors,
        'scope_set_version', c.scope_set_version,
        'scope_updates', synchro.scope_diff(c.scope_set, requested),
        'rebuild', coalesce((SELECT jsonb_agg(k ORDER BY k COLLATE "C")
                             FROM jsonb_object_keys(requested) k
                             WHERE k = ANY (c.scope_set)
                               AND NOT EXISTS (SELECT FROM jsonb_array_elements(active) a WHERE a ->> 'scope' = k)), '[]'),
        'has_more', has_more)
        || CASE WHEN has_more THEN '{}'
                ELSE jsonb_build_object('checksums', coalesce((SELECT jsonb_object_agg(a ->> 'scope',
                         synchro.scope_checksum(p.stream_generation, a ->> 'scope', hw)) FROM jsonb_array_elements(active) a), '{}')) END;
END
$$;
