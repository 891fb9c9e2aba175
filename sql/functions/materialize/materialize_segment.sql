-- synchro.materialize_segment: materializes the segment first_seq..last_seq of
-- the batch's source transactions (in the transaction ledger; their applicable
-- events in synchro_seg_event) set-based, with the result each would have had on
-- its own: rows are evaluated after each transaction in commit order, against
-- the state the transactions before it left (docs/decisions.md, "Segment
-- materialization"). Per transaction: events enter the event ledger and mark
-- their fences materialized (each must match a not yet materialized fence of the
-- event's own transaction: relation, operation, key, version; a push's fences
-- leave synchro.fence_pending); the last image of each row is applied to the
-- projections; each changed synced row gets an immutable version (wire image,
-- row checksum) and rows that rules reading a changed relation point at are
-- re-evaluated; membership edges open and close at the transaction's position;
-- net effects are written per scope at (commit_lsn, event_ordinal,
-- effect_ordinal), in (table_id, typed key, operation) order, with each changed
-- scope's digest. It reads projections and Synchro's state, never live rows.
-- The segment's transactions and events are the scratch rows in the tuple
-- ranges txn_tids and event_tids (first and last ctid) with seq in first_seq ..
-- last_seq; the other scratch tables must be empty (the caller empties them)
-- and it returns the number of rows it wrote to them.
DROP FUNCTION IF EXISTS synchro.materialize_segment(uuid, jsonb);
DROP FUNCTION IF EXISTS synchro.materialize_segment(uuid, integer, integer);
CREATE OR REPLACE FUNCTION synchro.materialize_segment(gen uuid, first_seq integer, last_seq integer, txn_tids tid[],
                                                       event_tids tid[])
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
-- Every statement is driven by the segment's scratch rows and reaches Synchro's
-- large tables only through index lookups written as correlated subqueries (or
-- TIDs; a LATERAL subquery carries LIMIT or OFFSET 0 so that the planner cannot
-- flatten it into a join), so no plan can scan or hash a large table whatever
-- statistics the planner holds for tables that grow fast. Sequential scans are
-- left to the scratch tables; JIT compilation would cost more than any
-- statement here.
SET enable_seqscan = off
SET jit = off
-- Rules read projections (synchro.projected), whatever the session set.
SET synchro.rule_reads = 'projections'
AS $$
DECLARE
    expected integer;
    reconciled integer;
    pushed boolean;    -- some fence is a push's (pending for its client)
    projected boolean; -- some row was projected before the segment
    repeated boolean;  -- some row changes in more than one of its transactions
    reads boolean;     -- some change is to a relation a scope rule reads
    prev_rows integer;
    written integer := 0; -- rows written to the scratch tables
    n integer;
BEGIN
    -- Rules read this generation's projections (synchro.projection_generation).
    PERFORM set_config('synchro.projection_generation', gen::text, true);

    -- Each event's fence, by its fence_id, must be the one recorded for it: same
    -- relation, operation, key and version, written by the event's own
    -- transaction (fence.xid's low 32 bits are the decoded xid), and not yet
    -- materialized. Fences are immutable: a fence is materialized once the event
    -- generation's ledger names it (at most once per generation:
    -- event_ledger_fence is unique; a bootstrap's stage materializes the fences
    -- of a table the active stream serves too). The
    -- transaction check groups the checked fences per transaction and meets the
    -- batch's transactions in a full join, which is only ever hashed or merged
    -- (never a rescan per row, whatever the scratch tables' estimates). Any
    -- fence that fails a check leaves the count short.
    SELECT coalesce(sum(m.n), 0), coalesce(sum(m.n) FILTER (WHERE m.xid = t.xid), 0), coalesce(bool_or(m.pushed), false)
    INTO expected, reconciled, pushed
    FROM (SELECT e.seq, f.xid::text::bigint % 4294967296 AS xid, count(*)::integer AS n,
                 bool_or(f.client_id IS NOT NULL) AS pushed
          FROM synchro_seg_event e
          LEFT JOIN LATERAL (SELECT f.xid, f.client_id FROM synchro.fence f
                             WHERE f.fence_id = e.f AND f.relation_id = e.r AND f.op = e.op AND f.key = e.k AND f.version = e.v
                               AND NOT EXISTS (SELECT FROM synchro.event_ledger l WHERE l.fence_id = f.fence_id AND l.stream_generation = gen)
                             OFFSET 0) f ON true
          WHERE e.ctid BETWEEN event_tids[1] AND event_tids[2] AND e.seq BETWEEN first_seq AND last_seq
          GROUP BY e.seq, f.xid) m
    FULL JOIN (SELECT t.seq, t.xid FROM synchro_seg_txn t
               WHERE t.ctid BETWEEN txn_tids[1] AND txn_tids[2] AND t.seq BETWEEN first_seq AND last_seq) t ON t.seq = m.seq;
    IF expected = 0 THEN
        RETURN 0;
    END IF;
    IF reconciled <> expected THEN
        RAISE EXCEPTION 'synchro: % of % fences are not recorded, already materialized, or disagree with their row events (relation, operation, key, version or transaction)',
            expected - reconciled, expected
            USING ERRCODE = 'data_corrupted';
    END IF;
    INSERT INTO synchro.event_ledger (stream_generation, commit_lsn, event_ordinal, relation_id, op, key, fence_id, version)
    SELECT gen, e.commit_lsn, e.o, e.r, e.op, e.k, e.f, e.v FROM synchro_seg_event e
    WHERE e.ctid BETWEEN event_tids[1] AND event_tids[2] AND e.seq BETWEEN first_seq AND last_seq;
    -- A push's fences no longer hold its client's pulls (synchro.capture_gate)
    -- once the active generation materialized them; a reset's staged catch-up
    -- leaves them to its activation.
    IF pushed AND gen = (SELECT p.stream_generation FROM synchro.progress p) THEN
        DELETE FROM synchro.fence_pending p
        WHERE p.fence_id = ANY (ARRAY(SELECT e.f FROM synchro_seg_event e
                                      WHERE e.ctid BETWEEN event_tids[1] AND event_tids[2] AND e.seq BETWEEN first_seq AND last_seq));
    END IF;

    -- Net change per row and transaction: the last event's image. A partial image
    -- (unchanged TOAST values left out) completes over the projection; the worker
    -- already completed it over earlier images of the same batch. With no
    -- projection either, the row cannot be completed (synchro.missing_image_base).
    -- tid is the row's projection tuple before the segment; last marks the row's
    -- last change in the segment.
    INSERT INTO synchro_seg_change (seq, commit_lsn, relation_id, key, old_image, new_image, event_ordinal, version, tid, last)
    SELECT l.seq, l.commit_lsn, l.r, l.k, cur.image,
           CASE WHEN l.op = 'delete' THEN NULL
                WHEN l.partial THEN coalesce(cur.image, synchro.missing_image_base(l.r)) || l.img
                ELSE l.img END,
           l.o, l.v, cur.ctid, l.seq = max(l.seq) OVER (PARTITION BY l.r, l.k)
    FROM (SELECT DISTINCT ON (e.seq, e.r, e.k) e.* FROM synchro_seg_event e
          WHERE e.ctid BETWEEN event_tids[1] AND event_tids[2] AND e.seq BETWEEN first_seq AND last_seq
          ORDER BY e.seq, e.r, e.k, e.o DESC) l
    LEFT JOIN LATERAL (SELECT p.ctid, p.image FROM synchro.projection p
                       WHERE p.relation_id = l.r AND p.key = l.k AND p.stream_generation = gen LIMIT 1) cur ON true;
    GET DIAGNOSTICS n = ROW_COUNT;
    written := written + n;
    -- Statements below that have nothing to do without such rows are skipped (a
    -- segment of first inserts under row-local rules needs none of them).
    SELECT coalesce(bool_or(c.tid IS NOT NULL), false), coalesce(bool_or(NOT c.last), false),
           coalesce(bool_or(c.relation_id IN (SELECT rr.relation_id FROM synchro.rule_read rr)), false)
    INTO projected, repeated, reads
    FROM synchro_seg_change c;

    -- Projections take each row's state after the segment: a row projected
    -- before it is updated or deleted in place, any other one inserted.
    IF projected THEN
        DELETE FROM synchro.projection p
        WHERE p.ctid = ANY (ARRAY(SELECT c.tid FROM synchro_seg_change c WHERE c.last AND c.new_image IS NULL AND c.tid IS NOT NULL));
        UPDATE synchro.projection p SET image = c.new_image
        FROM synchro_seg_change c
        WHERE c.last AND c.new_image IS NOT NULL AND c.tid IS NOT NULL AND p.ctid = c.tid;
    END IF;
    INSERT INTO synchro.projection (stream_generation, relation_id, key, image)
    SELECT gen, c.relation_id, c.key, c.new_image
    FROM synchro_seg_change c
    WHERE c.last AND c.new_image IS NOT NULL AND c.tid IS NULL;

    -- Impacted synced rows: their own changes, then rows that rules reading a
    -- changed relation point at (only in single-transaction segments).
    -- A changed row's wire image (synced columns only) and its checksum.
    INSERT INTO synchro_seg_impact (seq, commit_lsn, table_id, key, key_num, event_ordinal, own, version, image, wire, checksum,
                                    prev_seq, fresh, next_seq, next_commit_lsn, next_event_ordinal)
    WITH t AS MATERIALIZED (
        SELECT t.table_id, t.relation_id, r.key_type,
               ARRAY(SELECT unnest(r.columns)::text EXCEPT SELECT unnest(t.sync_columns)::text) AS unsynced
        FROM synchro.synced_table t JOIN synchro.relation r ON r.relation_id = t.relation_id)
    SELECT c.seq, c.commit_lsn, t.table_id, c.key, CASE WHEN t.key_type <> 'string' THEN c.key::numeric END,
           c.event_ordinal, true, c.version, c.new_image, w.wire, synchro.row_checksum(t.table_id, c.key, w.wire),
           lag(c.seq) OVER row_changes, c.tid IS NULL, lead(c.seq) OVER row_changes, lead(c.commit_lsn) OVER row_changes,
           lead(c.event_ordinal) OVER row_changes
    FROM synchro_seg_change c
    JOIN t ON t.relation_id = c.relation_id
    CROSS JOIN LATERAL (SELECT c.new_image - t.unsynced AS wire) w
    WINDOW row_changes AS (PARTITION BY t.table_id, c.key ORDER BY c.seq);
    GET DIAGNOSTICS n = ROW_COUNT;
    written := written + n;

    IF reads THEN
        INSERT INTO synchro_seg_impact (seq, commit_lsn, table_id, key, key_num, event_ordinal, own)
        SELECT c.seq, c.commit_lsn, rr.table_id, k, CASE WHEN r.key_type <> 'string' THEN k::numeric END, max(c.event_ordinal), false
        FROM synchro_seg_change c
        JOIN synchro.rule_read rr ON rr.relation_id = c.relation_id
        JOIN synchro.synced_table t ON t.table_id = rr.table_id
        JOIN synchro.relation r ON r.relation_id = t.relation_id
        CROSS JOIN LATERAL synchro.impacted_keys(rr.table_id, c.relation_id, c.key, c.old_image, c.new_image, false) k
        GROUP BY c.seq, c.commit_lsn, rr.table_id, k, r.key_type;
        GET DIAGNOSTICS n = ROW_COUNT;
        written := written + n;
        -- A row the transaction both changed and points a rule at keeps its own
        -- entry, at the later of the two ordinals.
        UPDATE synchro_seg_impact i SET event_ordinal = m.ordinal
        FROM (SELECT x.tid, x.ordinal
              FROM (SELECT a.ctid AS tid, a.own, a.event_ordinal, max(a.event_ordinal) OVER (PARTITION BY a.table_id, a.key, a.seq) AS ordinal
                    FROM synchro_seg_impact a) x
              WHERE x.own AND x.ordinal > x.event_ordinal) m
        WHERE i.ctid = m.tid;
        GET DIAGNOSTICS n = ROW_COUNT;
        written := written + n;
        DELETE FROM synchro_seg_impact i
        WHERE i.ctid = ANY (ARRAY(SELECT x.tid
                                  FROM (SELECT a.ctid AS tid, a.own, bool_or(a.own) OVER (PARTITION BY a.table_id, a.key, a.seq) AS owned
                                        FROM synchro_seg_impact a) x
                                  WHERE x.owned AND NOT x.own));

        UPDATE synchro_seg_impact i
        SET image = (SELECT p.image FROM synchro.projection p JOIN synchro.synced_table t ON t.relation_id = p.relation_id
                     WHERE t.table_id = i.table_id AND p.key = i.key AND p.stream_generation = gen),
            (version, checksum) = (SELECT CASE WHEN v.image IS NOT NULL THEN v.version END, v.checksum FROM synchro.row_version v
                                   WHERE v.table_id = i.table_id AND v.key = i.key AND v.commit_lsn < i.commit_lsn AND v.stream_generation = gen
                                   ORDER BY v.commit_lsn DESC, v.event_ordinal DESC LIMIT 1)
        WHERE NOT i.own;
        GET DIAGNOSTICS n = ROW_COUNT;
        written := written + n;
        DELETE FROM synchro_seg_impact i WHERE NOT i.own AND i.version IS NULL;
    END IF;

    -- New immutable versions of changed synced rows.
    INSERT INTO synchro.row_version (version, table_id, key, image, checksum, stream_generation, commit_lsn, event_ordinal)
    SELECT i.version, i.table_id, i.key, i.wire, i.checksum, gen, i.commit_lsn, i.event_ordinal
    FROM synchro_seg_impact i
    WHERE i.own;

    -- Scopes after each transaction.
    INSERT INTO synchro_seg_scope (seq, table_id, key, scope, commit_lsn, key_num, event_ordinal, version, checksum,
                                   next_seq, next_commit_lsn, next_event_ordinal)
    SELECT i.seq, i.table_id, i.key, s, i.commit_lsn, i.key_num, i.event_ordinal, i.version, i.checksum,
           i.next_seq, i.next_commit_lsn, i.next_event_ordinal
    FROM synchro_seg_impact i
    JOIN synchro.synced_table t ON t.table_id = i.table_id
    CROSS JOIN LATERAL synchro.scopes_of(t.scope_rule, i.key, i.image, false) s
    WHERE i.image IS NOT NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    written := written + n;

    -- Scopes before each transaction: the open edges for a row's first change in the
    -- segment (none for a row not projected before it: it has no current version),
    -- else the scopes its previous change in the segment left.
    prev_rows := 0;
    IF projected OR repeated OR reads THEN
        INSERT INTO synchro_seg_prev (seq, table_id, key, scope, version, checksum, commit_lsn, key_num, event_ordinal)
        SELECT i.seq, i.table_id, i.key, m.scope, s.version, s.checksum, i.commit_lsn, i.key_num, i.event_ordinal
        FROM synchro_seg_impact i
        JOIN LATERAL (SELECT m.scope FROM synchro.membership m
                      WHERE m.stream_generation = gen AND m.table_id = i.table_id AND m.key = i.key AND m.to_lsn IS NULL
                      OFFSET 0) m ON true
        JOIN LATERAL (SELECT v.version, v.checksum, v.image FROM synchro.row_version v
                      WHERE v.table_id = i.table_id AND v.key = i.key AND v.commit_lsn < i.commit_lsn AND v.stream_generation = gen
                      ORDER BY v.commit_lsn DESC, v.event_ordinal DESC LIMIT 1) s ON s.image IS NOT NULL
        WHERE i.prev_seq IS NULL AND i.fresh IS NOT TRUE
        UNION ALL
        SELECT sc.next_seq, sc.table_id, sc.key, sc.scope, sc.version, sc.checksum, sc.next_commit_lsn, sc.key_num,
               sc.next_event_ordinal
        FROM synchro_seg_scope sc
        WHERE sc.next_seq IS NOT NULL;
        GET DIAGNOSTICS prev_rows = ROW_COUNT;
        written := written + prev_rows;
    END IF;

    -- Net membership change per (transaction, scope, row): a scope the row is in
    -- after the transaction gets an upsert unless the row was in it at the same
    -- version; a scope it was in before and is not after gets a delete. delta is
    -- the checksum change, as a signed 32-bit residue.
    INSERT INTO synchro_seg_diff (seq, commit_lsn, scope, table_id, key, key_num, event_ordinal, upsert, version, joined, left_scope, delta)
    SELECT g.seq, g.commit_lsn, g.scope, g.table_id, g.key, g.key_num, g.event_ordinal,
           g.now_in, g.new_version, g.now_in AND NOT g.was_in,
           g.was_in AND NOT g.now_in,
           (coalesce(g.new_checksum, 0) - coalesce(g.old_checksum, 0) + 6442450944) % 4294967296 - 2147483648
    FROM (SELECT s.seq, s.table_id, s.key, s.scope, max(s.commit_lsn) AS commit_lsn, max(s.key_num) AS key_num,
                 max(s.event_ordinal) AS event_ordinal, bool_or(s.after) AS now_in, bool_or(NOT s.after) AS was_in,
                 max(s.version) FILTER (WHERE s.after) AS new_version, max(s.version) FILTER (WHERE NOT s.after) AS old_version,
                 max(s.checksum) FILTER (WHERE s.after) AS new_checksum, max(s.checksum) FILTER (WHERE NOT s.after) AS old_checksum
          FROM (SELECT sc.seq, sc.table_id, sc.key, sc.scope, sc.commit_lsn, sc.key_num, sc.event_ordinal, true AS after,
                       sc.version, sc.checksum
                FROM synchro_seg_scope sc
                UNION ALL
                SELECT o.seq, o.table_id, o.key, o.scope, o.commit_lsn, o.key_num, o.event_ordinal, false, o.version, o.checksum
                FROM synchro_seg_prev o) s
          GROUP BY s.seq, s.table_id, s.key, s.scope) g
    WHERE g.now_in <> g.was_in OR g.new_version IS DISTINCT FROM g.old_version;
    GET DIAGNOSTICS n = ROW_COUNT;
    written := written + n;

    INSERT INTO synchro.effect (stream_generation, scope, commit_lsn, event_ordinal, effect_ordinal, table_id, key, op, version)
    SELECT gen, d.scope, d.commit_lsn, d.event_ordinal,
           row_number() OVER (PARTITION BY d.seq, d.scope, d.event_ordinal
                              ORDER BY d.table_id, d.key_num, d.key COLLATE "C", d.upsert) - 1,
           d.table_id, d.key, CASE WHEN d.upsert THEN 'upsert' ELSE 'delete' END, d.version
    FROM synchro_seg_diff d;
    -- Pulls waiting for these scopes are woken when this commits (never for a
    -- reset's stage, which nothing serves yet).
    IF gen = (SELECT p.stream_generation FROM synchro.progress p) THEN
        PERFORM synchro.notify_changes(ARRAY(SELECT DISTINCT d.scope FROM synchro_seg_diff d));
    END IF;

    -- Membership edges: a row's first change in the segment that leaves a scope
    -- closes its open edge; every join opens an edge that the row's next leave in
    -- the segment (if any) closes.
    IF prev_rows > 0 THEN -- a leave needs a previous scope
        UPDATE synchro.membership m SET to_lsn = x.commit_lsn
        FROM (SELECT (SELECT m2.ctid FROM synchro.membership m2
                      WHERE m2.stream_generation = gen AND m2.table_id = f.table_id AND m2.key = f.key
                        AND m2.scope = f.scope AND m2.to_lsn IS NULL) AS edge, f.commit_lsn
              FROM (SELECT DISTINCT ON (d.scope, d.table_id, d.key) d.* FROM synchro_seg_diff d
                    WHERE d.joined OR d.left_scope ORDER BY d.scope, d.table_id, d.key, d.seq) f
              WHERE f.left_scope) x
        WHERE m.ctid = x.edge;
    END IF;
    INSERT INTO synchro.membership (stream_generation, scope, table_id, key, from_lsn, to_lsn)
    SELECT gen, x.scope, x.table_id, x.key, x.commit_lsn, x.next_leave
    FROM (SELECT d.*, lead(d.commit_lsn) OVER (PARTITION BY d.scope, d.table_id, d.key ORDER BY d.seq) AS next_leave
          FROM synchro_seg_diff d WHERE d.joined OR d.left_scope) x
    WHERE x.joined;

    -- Scope digests after each transaction that changed the scope, from each
    -- scope's digest before the segment (looked up once per scope: OFFSET 0
    -- keeps the planner from joining first and looking up once per row).
    -- Checksum changes are summed as signed 32-bit residues (integers sum into a
    -- bigint; bigints would sum into numeric).
    INSERT INTO synchro.scope_digest (stream_generation, scope, commit_lsn, digest, row_count)
    SELECT gen, d.scope, d.commit_lsn,
           ((coalesce(prev.digest, 0) + sum(d.delta) OVER w) % 4294967296 + 4294967296) % 4294967296,
           coalesce(prev.row_count, 0) + sum(d.members) OVER w
    FROM (SELECT d.seq, d.commit_lsn, d.scope, ((sum(d.delta) % 4294967296 + 6442450944) % 4294967296 - 2147483648)::integer AS delta,
                 (count(*) FILTER (WHERE d.joined) - count(*) FILTER (WHERE d.left_scope))::integer AS members
          FROM synchro_seg_diff d GROUP BY d.scope, d.seq, d.commit_lsn) d
    JOIN (SELECT s.scope, sd.digest, sd.row_count
          FROM (SELECT DISTINCT d.scope FROM synchro_seg_diff d) s
          LEFT JOIN LATERAL (SELECT sd.digest, sd.row_count FROM synchro.scope_digest sd
                             WHERE sd.stream_generation = gen AND sd.scope = s.scope
                             ORDER BY sd.commit_lsn DESC LIMIT 1) sd ON true
          OFFSET 0) prev ON prev.scope = d.scope
    WINDOW w AS (PARTITION BY d.scope ORDER BY d.seq);
    RETURN written;
END
$$;
