-- synchro.evaluate_readiness: the fail-closed capture readiness checks of docs/change-stream.md,
-- "Readiness", one {"check", "ok", "reason"} object per check in a fixed order;
-- read them through the view synchro.readiness. (jsonb rather than a record so
-- that sqlc, which cannot type the catalog views read here, can type the view.)
-- A check is ok only when every fact it needs is present, consistent and within
-- its configured finite limit. Missing, stale, inconsistent, unbounded or unknown
-- data fails it with a short reason; no check is ok by default. Every failure
-- condition below is written as "(healthy predicate) IS NOT TRUE" or NOT EXISTS,
-- so a NULL never passes.
CREATE OR REPLACE FUNCTION synchro.evaluate_readiness()
RETURNS SETOF jsonb
LANGUAGE plpgsql
-- Definer: operators read readiness without rights on the tables behind it.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The planner's estimates for the catalog functions here are large enough to
-- trigger JIT compilation, which costs seconds for a query that runs in milliseconds.
SET jit = off
AS $$
DECLARE
    v_gen uuid;
    v_ack pg_lsn;
    v_slot_name name;
    v_slot_problem text;
    v_wal_status text;
    v_slot_lsn pg_lsn;
    v_wal pg_lsn;
    v_flush pg_lsn;
BEGIN
    -- The slot and the WAL positions are live, not MVCC: each statement below
    -- reads a newer snapshot (READ COMMITTED), in the order that keeps the
    -- worker's own sequence (processed boundary, slot advance, acknowledgement)
    -- from looking like a violation: acknowledgement, then slot, then WAL
    -- position, then the processed boundary and everything else.
    SELECT p.stream_generation, coalesce(p.acknowledged_end_lsn, p.generation_start_lsn), p.slot_name
    INTO v_gen, v_ack, v_slot_name
    FROM synchro.progress p;
    SELECT s.problem, s.wal_status, s.confirmed_flush_lsn
    INTO v_slot_problem, v_wal_status, v_slot_lsn
    FROM synchro.slot_problem(v_slot_name) s;
    SELECT pg_current_wal_lsn(), pg_current_wal_flush_lsn() INTO v_wal, v_flush;

    RETURN QUERY
    WITH
    cur AS (
        SELECT clock_timestamp() AS ts, v_wal AS wal_lsn, v_flush AS flush_lsn
    ),
    cfg AS (
        SELECT s.singleton IS NOT NULL AS cfg_found, s.publication_name, s.heartbeat_max_age, s.wal_lag_limit_bytes,
               s.commit_lag_limit, s.worker_database,
               coalesce(isfinite(s.heartbeat_max_age) AND s.heartbeat_max_age > interval '0', false) AS hb_bounded,
               coalesce(isfinite(s.commit_lag_limit) AND s.commit_lag_limit > interval '0', false) AS commit_bounded
        FROM (SELECT) one LEFT JOIN synchro.settings s ON true
    ),
    prog AS (
        SELECT p.singleton IS NOT NULL AS prog_found, p.slot_name, p.database_name AS stream_database,
               p.stream_generation IS NOT DISTINCT FROM v_gen AS same_stream,
               p.generation_start_lsn AS start_lsn, coalesce(p.acknowledged_end_lsn, p.generation_start_lsn) AS ack_lsn,
               v_ack AS early_ack_lsn,
               p.processed_end_lsn AS processed_lsn, p.materialized_commit_lsn AS mat_commit_lsn,
               p.materialized_end_lsn AS mat_end_lsn, p.registry_generation AS active_generation,
               p.materialized_commit_time AS mat_commit_time, p.caught_up_at
        FROM (SELECT) one LEFT JOIN synchro.progress p ON true
    ),
    slot AS (
        SELECT v_slot_problem AS slot_problem, v_wal_status AS wal_status, v_slot_lsn AS slot_lsn
    ),
    hb AS (
        SELECT h.worker_id, h.database_name, h.slot_name, h.state, h.heartbeat_at, cur.ts - h.heartbeat_at AS age,
               h.registry_generation, h.materialized_commit_lsn, h.materialized_end_lsn
        FROM synchro.worker_heartbeat h, cur
    ),
    -- Heartbeats within the heartbeat limit; none while the limit is unbounded.
    fresh AS (
        SELECT hb.* FROM hb, cfg
        WHERE cfg.hb_bounded AND hb.age >= interval '0' AND hb.age <= cfg.heartbeat_max_age
    ),
    newest AS (
        SELECT hb.worker_id AS nw_worker, hb.state AS nw_state, hb.age AS nw_age
        FROM hb ORDER BY hb.heartbeat_at DESC, hb.worker_id LIMIT 1
    ),
    b AS (
        SELECT * FROM cur, cfg, prog, slot LEFT JOIN newest ON true
    ),
    -- The first drift of each registered relation (NULL: none): what
    -- synchro.catalog_drift reports (no decoded transaction shows it), else the
    -- catalog's view of drift that decoded transactions show.
    drift AS (
        SELECT r.relation_id, format('%I.%I', r.schema_name, r.relation_name) AS rel,
               coalesce(cd.problem, CASE
                   WHEN (n.nspname = r.schema_name AND c.relname = r.relation_name) IS NOT TRUE
                       THEN format('was renamed or moved to %I.%I', n.nspname, c.relname)
                   WHEN (c.relkind IN ('r', 'p') AND c.relpersistence = 'p') IS NOT TRUE
                       THEN 'is no longer a permanent logged table'
                   WHEN NOT EXISTS (
                       SELECT FROM pg_constraint k
                       JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
                       WHERE k.conrelid = c.oid AND k.contype = 'p' AND cardinality(k.conkey) = 1 AND NOT k.condeferrable
                         AND a.attname = r.key_column AND a.attnotnull
                         AND CASE WHEN a.atttypid IN ('text'::regtype::oid, 'character varying'::regtype::oid, 'uuid'::regtype::oid) THEN 'string'
                                  WHEN a.atttypid IN ('smallint'::regtype::oid, 'integer'::regtype::oid) THEN 'int'
                                  WHEN a.atttypid = 'bigint'::regtype::oid THEN 'int64'
                             END = r.key_type)
                       THEN format('primary key is no longer the registered %s key %I', r.key_type, r.key_column)
                   WHEN c.relreplident IS DISTINCT FROM 'd'
                       THEN 'has a replica identity other than DEFAULT'
                   WHEN EXISTS (SELECT FROM unnest(r.columns) col
                                WHERE NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = col
                                                                             AND a.attnum > 0 AND NOT a.attisdropped))
                       THEN 'lost a registered column'
                   WHEN EXISTS (SELECT FROM unnest(r.columns, r.column_types) u(col, typ)
                                JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = u.col AND a.attnum > 0 AND NOT a.attisdropped
                                WHERE a.atttypid IS DISTINCT FROM u.typ)
                       THEN 'has a registered column of another type'
               END) AS problem
        FROM synchro.relation r
        LEFT JOIN synchro.catalog_drift() cd ON cd.relation_id = r.relation_id
        LEFT JOIN pg_class c ON c.oid = r.relation_oid
        LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
    ),
    -- The first missing, disabled or altered capture trigger of each registered
    -- relation: key guard, fence and truncate guard on the relation and on every
    -- partition, and the partition guard on every partition (row triggers are
    -- cloned; truncate and partition guards are installed by
    -- synchro.guard_partitions); enabled means fires in ordinary sessions (O or
    -- A). The fence's arguments carry the registered identity; the key guard
    -- and the fence run the relation's generated functions, which must be what
    -- this bundle's generators make of the registry now.
    trig AS (
        SELECT r.relation_id, format('%I.%I', r.schema_name, r.relation_name) AS rel,
               CASE WHEN NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = r.relation_oid) THEN 'relation is missing'
               ELSE (
                   SELECT format('trigger %s on %I.%I is %s', e.name, pn.nspname, pc.relname,
                                 CASE WHEN t.oid IS NULL THEN 'missing'
                                      WHEN t.tgenabled NOT IN ('O', 'A') THEN 'disabled'
                                      ELSE 'altered' END)
                   -- The relation and its partitions (the tree is empty for a plain
                   -- table; synchro.partition_tree locks nothing).
                   FROM (SELECT r.relation_oid AS relid, 0 AS level
                         UNION ALL
                         SELECT t.relid, t.level FROM synchro.partition_tree(r.relation_oid) t) pt
                   JOIN pg_class pc ON pc.oid = pt.relid
                   JOIN pg_namespace pn ON pn.oid = pc.relnamespace
                   CROSS JOIN (VALUES ('synchro_key_guard', 'synchro_capture', 'key_guard_' || r.relation_id, 27::int2,
                                       ARRAY[r.key_column::text, CASE WHEN rc.relkind = 'p' THEN 'partitioned' ELSE '' END], false,
                                       gen.key_guard),
                                      ('synchro_fence', 'synchro_capture', 'fence_' || r.relation_id, 29::int2,
                                       ARRAY[r.relation_id::text, r.registration_kind, r.schema_name::text, r.relation_name::text,
                                             r.relation_oid::text, r.key_column::text, coalesce(st.table_id::text, '')], false,
                                       gen.fence),
                                      ('synchro_truncate_guard', 'synchro', 'truncate_guard', 34::int2, ARRAY[]::text[], false, NULL),
                                      ('synchro_partition_guard', 'synchro', 'partition_guard', 30::int2, ARRAY[]::text[], true, NULL))
                        e(name, schema, func, tgtype, args, partitions_only, source)
                   LEFT JOIN pg_trigger t ON t.tgrelid = pt.relid AND t.tgname = e.name
                   LEFT JOIN pg_proc pr ON pr.oid = t.tgfoid
                   LEFT JOIN pg_namespace prn ON prn.oid = pr.pronamespace
                   WHERE (pt.level > 0 OR NOT e.partitions_only)
                     AND (t.tgenabled IN ('O', 'A') AND prn.nspname = e.schema AND pr.proname = e.func
                          AND (e.source IS NULL OR pr.prosrc = e.source)
                          AND t.tgtype = e.tgtype AND t.tgnargs = cardinality(e.args)
                          AND t.tgargs = (SELECT coalesce(string_agg(convert_to(a, getdatabaseencoding()) || '\x00'::bytea, ''::bytea ORDER BY i), ''::bytea)
                                          FROM unnest(e.args) WITH ORDINALITY x(a, i))) IS NOT TRUE
                   ORDER BY pt.level, pt.relid, e.name
                   LIMIT 1)
               END AS problem
        FROM synchro.relation r
        LEFT JOIN synchro.synced_table st ON st.relation_id = r.relation_id
        LEFT JOIN pg_class rc ON rc.oid = r.relation_oid
        CROSS JOIN LATERAL (SELECT synchro.fence_source(r.relation_id) AS fence,
                                   synchro.key_guard_source(r.relation_id) AS key_guard) gen
    ),
    pub AS (
        SELECT p.oid AS pub_oid, p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, p.pubviaroot
        FROM cfg LEFT JOIN pg_publication p ON p.pubname = cfg.publication_name
    ),
    checks AS (
        SELECT 1 AS ord, 'database'::text AS name,
               CASE WHEN NOT EXISTS (SELECT FROM synchro.function_bundle f WHERE f.digest <> '') THEN 'no function bundle installed'
                    WHEN NOT b.cfg_found THEN 'settings row missing'
               END AS fail,
               'reachable; function bundle installed' AS note
        FROM b
        UNION ALL
        SELECT 2, 'worker',
               CASE WHEN b.heartbeat_max_age IS NULL THEN 'heartbeat_max_age not configured: freshness unknown'
                    WHEN NOT b.hb_bounded THEN format('heartbeat_max_age %s is unbounded: freshness unknown', b.heartbeat_max_age)
                    WHEN NOT b.prog_found AND b.nw_worker IS NULL THEN 'no stream started'
                    -- A worker that cannot start the stream (a slot name another
                    -- database holds, say) says so in its heartbeat state.
                    WHEN NOT b.prog_found THEN format('no stream started (newest heartbeat: worker %s, %s, %ss old)',
                                                      b.nw_worker, b.nw_state, round(extract(epoch FROM b.nw_age), 1))
                    WHEN b.nw_worker IS NULL THEN 'no worker heartbeat'
                    -- The stream record names the active slot; a worker started
                    -- with another --slot refuses to stream, and is named.
                    WHEN NOT EXISTS (SELECT FROM fresh f WHERE f.state = 'streaming' AND f.database_name = current_database()
                                                           AND f.slot_name = b.slot_name)
                        THEN coalesce((SELECT format('worker %s runs with --slot %s, but the active stream''s slot is %s',
                                                     f.worker_id, f.slot_name, b.slot_name)
                                       FROM fresh f WHERE f.slot_name IS DISTINCT FROM b.slot_name
                                       ORDER BY f.heartbeat_at DESC, f.worker_id LIMIT 1),
                                      format('no streaming worker with a fresh heartbeat (newest: worker %s, %s, %ss old)',
                                             b.nw_worker, b.nw_state, round(extract(epoch FROM b.nw_age), 1)))
               END,
               (SELECT format('worker %s streaming', f.worker_id) FROM fresh f
                WHERE f.state = 'streaming' AND f.database_name = current_database() AND f.slot_name = b.slot_name
                ORDER BY f.heartbeat_at DESC LIMIT 1)
        FROM b
        UNION ALL
        SELECT 3, 'registry',
               CASE WHEN NOT b.prog_found THEN 'no stream started'
                    WHEN NOT EXISTS (SELECT FROM synchro.registry_generation g
                                     WHERE g.generation = b.active_generation AND g.validated_at IS NOT NULL)
                        THEN format('active registry generation %s is not durable and validated', b.active_generation)
                    WHEN (b.active_generation = (SELECT max(g.generation) FROM synchro.registry_generation g)) IS NOT TRUE
                        THEN format('registry generation %s is durable but not active (active: %s)',
                                    (SELECT max(g.generation) FROM synchro.registry_generation g), b.active_generation)
                    WHEN EXISTS (SELECT FROM drift WHERE drift.problem IS NOT NULL)
                        THEN coalesce((SELECT format('relation drift: %s %s', drift.rel, drift.problem) FROM drift
                                       WHERE drift.problem IS NOT NULL ORDER BY drift.relation_id LIMIT 1), 'relation drift')
               END,
               format('generation %s active; %s relations without drift', b.active_generation, (SELECT count(*) FROM drift))
        FROM b
        UNION ALL
        SELECT 4, 'triggers',
               CASE WHEN EXISTS (SELECT FROM trig WHERE trig.problem IS NOT NULL)
                        THEN coalesce((SELECT format('%s: %s', trig.rel, trig.problem) FROM trig
                                       WHERE trig.problem IS NOT NULL ORDER BY trig.relation_id LIMIT 1), 'capture trigger missing')
               END,
               format('%s relations with enabled capture triggers', (SELECT count(*) FROM trig))
        FROM b
        UNION ALL
        SELECT 5, 'publication',
               CASE WHEN b.publication_name IS NULL THEN 'no publication configured'
                    WHEN pub.pub_oid IS NULL THEN format('publication %I is missing', b.publication_name)
                    WHEN pub.puballtables THEN format('publication %I publishes all tables', b.publication_name)
                    WHEN (pub.pubinsert AND pub.pubupdate AND pub.pubdelete AND pub.pubtruncate AND pub.pubviaroot) IS NOT TRUE
                        THEN format('publication %I must publish insert, update, delete and truncate via the partition root',
                                    b.publication_name)
                    WHEN EXISTS (SELECT FROM pg_publication_namespace pns WHERE pns.pnpubid = pub.pub_oid)
                        THEN format('publication %I publishes whole schemas', b.publication_name)
                    WHEN EXISTS (SELECT FROM synchro.relation r
                                 WHERE NOT EXISTS (SELECT FROM pg_publication_rel pr
                                                   WHERE pr.prpubid = pub.pub_oid AND pr.prrelid = r.relation_oid))
                        THEN coalesce((SELECT format('publication %I lacks registered relation %I.%I', b.publication_name,
                                            r.schema_name, r.relation_name)
                              FROM synchro.relation r
                              WHERE NOT EXISTS (SELECT FROM pg_publication_rel pr
                                                WHERE pr.prpubid = pub.pub_oid AND pr.prrelid = r.relation_oid)
                              ORDER BY r.relation_id LIMIT 1), 'publication lacks a registered relation')
                    WHEN EXISTS (SELECT FROM pg_publication_rel pr
                                 WHERE pr.prpubid = pub.pub_oid
                                   AND NOT EXISTS (SELECT FROM synchro.relation r WHERE r.relation_oid = pr.prrelid))
                        THEN coalesce((SELECT format('publication %I contains unregistered relation %I.%I', b.publication_name,
                                            n.nspname, c.relname)
                              FROM pg_publication_rel pr
                              JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                              WHERE pr.prpubid = pub.pub_oid
                                AND NOT EXISTS (SELECT FROM synchro.relation r WHERE r.relation_oid = pr.prrelid)
                              ORDER BY pr.prrelid LIMIT 1), 'publication contains an unregistered relation')
                    WHEN EXISTS (SELECT FROM pg_publication_rel pr
                                 WHERE pr.prpubid = pub.pub_oid AND (pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL))
                        THEN format('publication %I filters rows or columns', b.publication_name)
               END,
               format('publication %I holds exactly the %s registered relations', b.publication_name,
                      (SELECT count(*) FROM synchro.relation))
        FROM b, pub
        UNION ALL
        SELECT 6, 'slot',
               CASE WHEN NOT b.prog_found THEN 'no stream started'
                    ELSE b.slot_problem
               END,
               format('%s (pgoutput, wal_status %s)', b.slot_name, b.wal_status)
        FROM b
        UNION ALL
        SELECT 7, 'poison',
               CASE WHEN EXISTS (SELECT FROM synchro.poison_txn p WHERE p.resolved_at IS NULL)
                        THEN coalesce((SELECT format('%s unresolved poison transaction(s); first at commit %s (%s)',
                                                     (SELECT count(*) FROM synchro.poison_txn q WHERE q.resolved_at IS NULL),
                                                     p.commit_lsn, p.failure_class)
                                       FROM synchro.poison_txn p WHERE p.resolved_at IS NULL
                                       ORDER BY p.commit_lsn, p.poison_id LIMIT 1), 'unresolved poison transaction')
               END,
               'no blocking poison transaction'
        FROM b
        UNION ALL
        SELECT 8, 'positions',
               CASE WHEN NOT b.prog_found THEN 'no stream started'
                    WHEN (b.start_lsn <= b.ack_lsn AND b.ack_lsn <= b.processed_lsn) IS NOT TRUE
                        THEN format('durable positions out of order: generation start %s, acknowledged %s, processed %s',
                                    b.start_lsn, b.ack_lsn, b.processed_lsn)
                    WHEN (b.mat_end_lsn IS NULL OR b.mat_end_lsn <= b.processed_lsn) IS NOT TRUE
                        THEN format('materialized end %s is after the processed boundary %s', b.mat_end_lsn, b.processed_lsn)
                    WHEN (b.mat_commit_lsn IS NULL OR b.mat_commit_lsn >= b.start_lsn) IS NOT TRUE
                        THEN format('materialized commit %s is before the generation start %s', b.mat_commit_lsn, b.start_lsn)
                    WHEN NOT b.same_stream THEN 'the stream changed while readiness was read'
                    WHEN b.slot_lsn IS NULL THEN 'slot position unknown'
                    WHEN (b.slot_lsn >= b.early_ack_lsn) IS NOT TRUE
                        THEN format('slot at %s is before the acknowledgement %s', b.slot_lsn, b.early_ack_lsn)
                    WHEN (b.slot_lsn <= b.processed_lsn) IS NOT TRUE
                        THEN format('slot at %s is after the processed boundary %s', b.slot_lsn, b.processed_lsn)
                    WHEN (b.slot_lsn <= b.wal_lsn) IS NOT TRUE
                        THEN format('slot at %s is after the current WAL position %s', b.slot_lsn, b.wal_lsn)
               END,
               format('generation start %s <= acknowledged %s <= slot %s <= processed %s', b.start_lsn, b.ack_lsn,
                      b.slot_lsn, b.processed_lsn)
        FROM b
        UNION ALL
        SELECT 9, 'heartbeat_age',
               CASE WHEN b.heartbeat_max_age IS NULL THEN 'heartbeat_max_age not configured'
                    WHEN NOT b.hb_bounded THEN format('heartbeat_max_age %s is unbounded', b.heartbeat_max_age)
                    WHEN b.nw_worker IS NULL THEN 'no worker heartbeat'
                    WHEN (b.nw_age >= interval '0') IS NOT TRUE
                        THEN format('heartbeat of worker %s is in the future', b.nw_worker)
                    WHEN (b.nw_age <= b.heartbeat_max_age) IS NOT TRUE
                        THEN format('newest heartbeat (worker %s) is %ss old, limit %ss', b.nw_worker,
                                    round(extract(epoch FROM b.nw_age), 1), trim_scale(extract(epoch FROM b.heartbeat_max_age)))
                    WHEN NOT b.prog_found THEN 'no durable progress to compare heartbeats with'
                    WHEN EXISTS (SELECT FROM fresh f
                                 WHERE (    (f.registry_generation IS NULL OR f.registry_generation <= b.active_generation)
                                        AND (f.materialized_commit_lsn IS NULL OR f.materialized_commit_lsn <= b.mat_commit_lsn)
                                        AND (f.materialized_end_lsn IS NULL OR f.materialized_end_lsn <= b.mat_end_lsn)) IS NOT TRUE)
                        THEN coalesce((SELECT format('heartbeat of worker %s reports a registry generation or materialized position after durable progress',
                                            f.worker_id)
                              FROM fresh f
                              WHERE (    (f.registry_generation IS NULL OR f.registry_generation <= b.active_generation)
                                     AND (f.materialized_commit_lsn IS NULL OR f.materialized_commit_lsn <= b.mat_commit_lsn)
                                     AND (f.materialized_end_lsn IS NULL OR f.materialized_end_lsn <= b.mat_end_lsn)) IS NOT TRUE
                              ORDER BY f.worker_id LIMIT 1), 'a heartbeat reports positions after durable progress')
               END,
               format('%ss (limit %ss)', round(extract(epoch FROM b.nw_age), 1), trim_scale(extract(epoch FROM b.heartbeat_max_age)))
        FROM b
        UNION ALL
        SELECT 10, 'wal_lag',
               CASE WHEN b.wal_lag_limit_bytes IS NULL THEN 'wal_lag_limit_bytes not configured'
                    WHEN (b.wal_lag_limit_bytes > 0) IS NOT TRUE
                        THEN format('wal_lag_limit_bytes %s is not a positive bound', b.wal_lag_limit_bytes)
                    WHEN b.slot_lsn IS NULL THEN 'WAL lag unknown: no usable replication slot'
                    WHEN (b.wal_lsn - b.slot_lsn >= 0) IS NOT TRUE THEN 'WAL lag unknown: slot after the current WAL position'
                    WHEN (b.wal_lsn - b.slot_lsn <= b.wal_lag_limit_bytes) IS NOT TRUE
                        THEN format('WAL lag %s bytes exceeds the limit of %s bytes', b.wal_lsn - b.slot_lsn, b.wal_lag_limit_bytes)
               END,
               format('%s bytes (limit %s)', b.wal_lsn - b.slot_lsn, b.wal_lag_limit_bytes)
        FROM b
        UNION ALL
        SELECT 11, 'commit_lag',
               CASE WHEN b.commit_lag_limit IS NULL THEN 'commit_lag_limit not configured'
                    WHEN NOT b.commit_bounded THEN format('commit_lag_limit %s is unbounded', b.commit_lag_limit)
                    WHEN NOT b.prog_found THEN 'commit lag unknown: no stream started'
                    WHEN b.slot_lsn IS NULL THEN 'commit lag unknown: no usable replication slot'
                    WHEN l.lag IS NULL THEN 'commit lag unknown: no source commit time recorded'
                    WHEN (l.lag >= interval '0') IS NOT TRUE THEN 'commit lag unknown: a source commit time in the future'
                    WHEN (l.lag <= b.commit_lag_limit) IS NOT TRUE
                        THEN format('commit lag %ss exceeds the limit %ss', round(extract(epoch FROM l.lag), 3),
                                    trim_scale(extract(epoch FROM b.commit_lag_limit)))
               END,
               format('%ss (limit %ss)', round(extract(epoch FROM l.lag), 1), trim_scale(extract(epoch FROM b.commit_lag_limit)))
        FROM b
        -- An upper bound from source commit times (synchro.commit_lag).
        CROSS JOIN LATERAL (SELECT synchro.commit_lag(b.mat_commit_time, b.caught_up_at, b.slot_lsn, b.flush_lsn, b.ts) AS lag) l
        UNION ALL
        SELECT 12, 'worker_database',
               CASE WHEN b.worker_database IS NULL THEN 'worker_database not configured'
                    WHEN b.worker_database <> current_database()
                        THEN format('the configured Synchro database is %s, this is %s', b.worker_database, current_database())
                    WHEN b.prog_found AND (b.stream_database = current_database()) IS NOT TRUE
                        THEN format('the stream was started in database %s', b.stream_database)
                    WHEN EXISTS (SELECT FROM hb, cfg
                                 WHERE (NOT cfg.hb_bounded OR hb.age <= cfg.heartbeat_max_age)
                                   AND hb.database_name IS DISTINCT FROM cfg.worker_database)
                        THEN coalesce((SELECT format('worker %s is connected to database %s', hb.worker_id, hb.database_name)
                              FROM hb, cfg
                              WHERE (NOT cfg.hb_bounded OR hb.age <= cfg.heartbeat_max_age)
                                AND hb.database_name IS DISTINCT FROM cfg.worker_database
                              ORDER BY hb.worker_id LIMIT 1), 'a worker is connected to another database')
               END,
               format('%s', current_database())
        FROM b
        UNION ALL
        SELECT 13, 'reset',
               (SELECT format('stream reset %s is %s: capture stays blocked until it is activated or aborted', r.reset_id, r.phase)
                FROM synchro.stream_reset r WHERE r.phase IN ('staging', 'catching_up', 'ready') AND r.kind = 'reset'),
               -- A bootstrap holds back only the relations it stages: the
               -- tables already served stay ready.
               coalesce((SELECT format('bootstrap %s is %s (%s rows staged); its tables are served once it is activated',
                                       r.reset_id, r.phase, r.rows_staged)
                         FROM synchro.stream_reset r WHERE r.phase IN ('staging', 'catching_up', 'ready') AND r.kind = 'bootstrap'),
                        CASE WHEN EXISTS (SELECT FROM synchro.relation x WHERE x.bootstrap_pending)
                             THEN 'a projection bootstrap is pending: synchrod starts it' END,
                        'no stream reset in progress')
    )
    SELECT jsonb_build_object('check', name, 'ok', fail IS NULL, 'reason', coalesce(fail, note, 'ok'))
    FROM checks
    ORDER BY ord;
END
$$;
