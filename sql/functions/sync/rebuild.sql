-- synchro.rebuild: POST /sync/rebuild (docs/protocol.md) for user_id: the
-- complete contents of one assigned scope at one fixed position, in keyset pages
-- of at most page_limit records ordered by (table_id, key), and of rows of at
-- most page_bytes in all (text of the images) unless the page has one row:
-- every page has at least one record. A session starts
-- (cursor null) at the materialized high-watermark h and every later page reads
-- the same h from its signed session cursor: membership edges valid at
-- transaction_end(h) and each row's latest version at or before h, so pages stay
-- consistent while the worker keeps materializing. The final page carries
-- final_scope_cursor = transaction_end(h) and the scope checksum at h, so
-- incremental pull continues with no gap and no overlap. Session and final
-- cursors are bound to the client and to the scope's assignment epoch
-- (synchro.scope_token): a session cursor that does not verify (edited, another
-- scope, another stream generation, another client, the scope assigned again
-- since the session started, or a session begun before the scope's floor,
-- synchro.scope_floor) is refused; the client restarts with cursor null. So
-- is, as 410 rebuild_expired (retryable), a session whose position fell behind
-- the retention horizon (synchro.prune_history), also during the page.
-- The capture gate runs first. The page is built as json text, each row image
-- rendered once (docs/decisions.md, "Pages as json text").
DROP FUNCTION IF EXISTS synchro.rebuild(text, jsonb, integer);
DROP FUNCTION IF EXISTS synchro.rebuild(text, jsonb, integer, bigint);
CREATE FUNCTION synchro.rebuild(user_id text, request jsonb, page_limit integer, page_bytes bigint)
RETURNS json
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c synchro.client := synchro.client_session(user_id, request, false);
    target text := request ->> 'scope';
    p synchro.progress;
    session text[];
    h pg_lsn;
    horizon pg_lsn;
    checksum text;
    after_table integer := -1;
    after_key text := '';
    records json;
    fetched integer;
    served integer;
    last_table integer;
    last_key text;
BEGIN
    IF target IS NULL OR target <> ALL (c.scope_set) THEN
        PERFORM synchro.refuse(400, 'invalid_request', 'the scope is not assigned to this client');
    END IF;
    PERFORM synchro.capture_gate(c.client_id);
    -- The horizon first: it never passes a materialized transaction, so a new
    -- session's position is at or after it.
    horizon := synchro.history_horizon_lsn((SELECT x.stream_generation FROM synchro.progress x));
    SELECT * INTO STRICT p FROM synchro.progress;
    IF request ->> 'cursor' IS NULL THEN
        h := coalesce(p.materialized_commit_lsn, '0/0');
    ELSE
        session := synchro.read_scope_token('r', request ->> 'cursor', p.stream_generation, c, target);
        IF session IS NULL OR cardinality(session) <> 3 THEN
            PERFORM synchro.refuse(400, 'invalid_request', 'the rebuild cursor is not valid for this scope; restart the rebuild with cursor null');
        END IF;
        h := session[1]::pg_lsn;
        IF h < (SELECT f.floor_lsn FROM synchro.scope_floor f WHERE f.stream_generation = p.stream_generation AND f.scope = target) THEN
            PERFORM synchro.refuse(400, 'invalid_request', 'the scope gained rows of a newly served table since this rebuild began; restart the rebuild with cursor null');
        END IF;
        IF h < horizon THEN
            PERFORM synchro.refuse(410, 'rebuild_expired', 'the history at this rebuild''s position was pruned; restart the rebuild with cursor null');
        END IF;
        after_table := session[2]::integer;
        after_key := session[3];
    END IF;

    WITH page AS (
        SELECT m.table_id, m.key, v.version, v.img, v.checksum
        FROM synchro.membership m
        JOIN LATERAL (SELECT v.version, v.image::text AS img, v.checksum FROM synchro.row_version v
                      WHERE v.table_id = m.table_id AND v.key = m.key AND v.commit_lsn <= h AND v.stream_generation = p.stream_generation
                      ORDER BY v.commit_lsn DESC, v.event_ordinal DESC LIMIT 1) v ON true
        WHERE m.stream_generation = p.stream_generation AND m.scope = target
          AND (m.table_id, m.key) > (after_table, after_key)
          AND m.from_lsn <= h AND (m.to_lsn IS NULL OR m.to_lsn > h)
        ORDER BY m.table_id, m.key
        LIMIT page_limit + 1),
    sized AS (
        SELECT page.*, row_number() OVER o AS n, sum(octet_length(page.img)) OVER o AS upto
        FROM page WINDOW o AS (ORDER BY page.table_id, page.key))
    SELECT count(*), count(*) FILTER (WHERE x.served),
           coalesce(json_agg(json_build_object('table', t.name, 'pk', synchro.wire_pk(r.key_column, r.key_type, x.key),
                                               'row', x.img::json, 'server_version', x.version, 'row_checksum', x.checksum)
                             ORDER BY x.n) FILTER (WHERE x.served), '[]'),
           (array_agg(x.table_id ORDER BY x.n DESC) FILTER (WHERE x.served))[1],
           (array_agg(x.key ORDER BY x.n DESC) FILTER (WHERE x.served))[1]
    INTO fetched, served, records, last_table, last_key
    FROM (SELECT sized.*, sized.n <= page_limit AND (sized.n = 1 OR sized.upto <= page_bytes) AS served FROM sized) x
    JOIN synchro.synced_table t ON t.table_id = x.table_id
    JOIN synchro.relation r ON r.relation_id = t.relation_id;

    IF fetched = served THEN
        checksum := synchro.scope_checksum(p.stream_generation, target, h);
    END IF;
    -- Pruning moves the horizon and removes the history behind it in one
    -- transaction: if this page could have missed a removed row, the horizon
    -- is past h now.
    IF h < synchro.history_horizon_lsn(p.stream_generation) THEN
        PERFORM synchro.refuse(410, 'rebuild_expired', 'the history at this rebuild''s position was pruned; restart the rebuild with cursor null');
    END IF;
    IF fetched > served THEN
        RETURN json_build_object('scope', target, 'records', records, 'has_more', true,
            'cursor', synchro.scope_token('r', p.stream_generation, c, target, ARRAY[h::text, last_table::text, last_key]));
    END IF;
    RETURN json_build_object('scope', target, 'records', records, 'has_more', false, 'cursor', NULL,
        'final_scope_cursor', synchro.scope_cursor(p.stream_generation, c, target, h, 2147483647, 2147483647),
        'checksum', checksum);
END
$$;
