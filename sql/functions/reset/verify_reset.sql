-- synchro.verify_reset: verifies a reset whose staged catch-up reached its
-- barrier, recomputing from the staged rows independently of the digests
-- materialization kept: every current staged version's checksum from its
-- image (synchro.row_checksum), every synced row's staged projection against
-- its current version's image, and every scope's digest and row count at the
-- barrier from its open members. All agree: the reset is ready (its
-- verification recorded). Any disagreement is refused (XX001) with the counts,
-- and the reset stays catching up: abort it.
CREATE OR REPLACE FUNCTION synchro.verify_reset(id uuid)
RETURNS synchro.stream_reset
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
-- The target generation is new to the planner's statistics (its rows are
-- estimated at one): without this its joins over a million staged rows are
-- planned as nested loops, a scan of the stage per synced table.
SET enable_nestloop = off
AS $$
DECLARE
    r synchro.stream_reset;
    bad_checksums bigint;
    bad_images bigint;
    bad_scopes bigint;
    scopes bigint;
    versions bigint;
BEGIN
    SELECT * INTO r FROM synchro.stream_reset WHERE reset_id = id FOR UPDATE;
    IF NOT FOUND OR r.phase <> 'catching_up' OR r.barrier_end_lsn IS NULL
       OR r.processed_end_lsn IS DISTINCT FROM r.barrier_end_lsn OR r.materialized_end_lsn IS DISTINCT FROM r.barrier_end_lsn THEN
        RAISE EXCEPTION 'synchro: reset % has not caught up to its barrier', id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    CREATE TEMP TABLE synchro_verify_current ON COMMIT DROP AS
    SELECT DISTINCT ON (v.table_id, v.key) v.table_id, v.key, v.image, v.checksum
    FROM synchro.row_version v
    WHERE v.stream_generation = r.target_generation AND v.commit_lsn <= r.barrier_commit_lsn
    ORDER BY v.table_id, v.key, v.commit_lsn DESC, v.event_ordinal DESC;
    SELECT count(*), count(*) FILTER (WHERE c.checksum <> synchro.row_checksum(c.table_id, c.key, c.image))
    INTO versions, bad_checksums FROM synchro_verify_current c;
    SELECT count(*) INTO bad_images
    FROM (SELECT t.table_id, p.key, p.image - t.unsynced AS wire
          -- The columns a table does not sync, once a table (OFFSET 0: not
          -- once a row).
          FROM (SELECT t.table_id, t.relation_id,
                       ARRAY(SELECT unnest(rel.columns)::text EXCEPT SELECT unnest(t.sync_columns)::text) AS unsynced
                FROM synchro.synced_table t
                JOIN synchro.relation rel ON rel.relation_id = t.relation_id OFFSET 0) t
          JOIN synchro.projection p ON p.relation_id = t.relation_id AND p.stream_generation = r.target_generation) p
    FULL JOIN (SELECT * FROM synchro_verify_current c WHERE c.image IS NOT NULL) c ON c.table_id = p.table_id AND c.key = p.key
    WHERE p.wire IS DISTINCT FROM c.image;
    WITH members AS (
        SELECT m.scope, sum(c.checksum) % 4294967296 AS digest, count(*) AS n
        FROM synchro.membership m
        JOIN synchro_verify_current c ON c.table_id = m.table_id AND c.key = m.key
        WHERE m.stream_generation = r.target_generation AND m.from_lsn <= r.barrier_commit_lsn
          AND (m.to_lsn IS NULL OR m.to_lsn > r.barrier_commit_lsn)
        GROUP BY m.scope),
    digests AS (
        SELECT DISTINCT ON (d.scope) d.scope, d.digest, d.row_count
        FROM synchro.scope_digest d
        WHERE d.stream_generation = r.target_generation AND d.commit_lsn <= r.barrier_commit_lsn
        ORDER BY d.scope, d.commit_lsn DESC)
    SELECT count(*), count(*) FILTER (WHERE coalesce(m.digest, 0) <> coalesce(d.digest, 0) OR coalesce(m.n, 0) <> coalesce(d.row_count, 0))
    INTO scopes, bad_scopes
    FROM members m FULL JOIN digests d ON d.scope = m.scope;
    DROP TABLE synchro_verify_current;
    IF bad_checksums + bad_images + bad_scopes > 0 THEN
        RAISE EXCEPTION 'synchro: reset % failed verification: % row checksums, % projections and % scope digests disagree; abort it',
            id, bad_checksums, bad_images, bad_scopes
            USING ERRCODE = 'data_corrupted';
    END IF;
    UPDATE synchro.stream_reset x
    SET phase = 'ready', phase_at = now(), verified_at = now(),
        verification = jsonb_build_object('versions', versions, 'scopes', scopes)
    WHERE x.reset_id = id
    RETURNING * INTO r;
    RETURN r;
END
$$;
