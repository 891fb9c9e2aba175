-- synchro.stage_synced_rows: stages, in the baseline transaction of reset id
-- (after the coordinator copied the projections), the next chunk of synced
-- table tid's rows: the at most max_rows staged projections whose key follows
-- after_key (NULL: from the first), in key order. Each gets its final
-- source-owned version (its row head's: the last fence of the row in the
-- snapshot) with its wire image and row checksum (synchro.row_checksum), and
-- its membership edges from the table's rule (synchro.scopes_of over the
-- staged projections), all at the baseline position. A row without a row head
-- (written before registration) is refused (55000). A bootstrap's rows get
-- their versions only (their memberships are evaluated at its activation, over
-- the active projections): a row without a row head gets a new version, which
-- its activation makes the row head's unless a fence moved it meanwhile.
-- Returns the rows staged and the chunk's last key; no rows: the table is done.
CREATE OR REPLACE FUNCTION synchro.stage_synced_rows(id uuid, tid integer, after_key text, max_rows integer,
                                                     OUT staged integer, OUT last_key text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
SET synchro.rule_reads = 'projections'
AS $$
DECLARE
    r synchro.stream_reset;
    t synchro.synced_table;
    unsynced text[];
    headless integer;
    bootstrap boolean;
BEGIN
    SELECT * INTO STRICT r FROM synchro.stream_reset WHERE reset_id = id AND phase = 'staging';
    bootstrap := r.kind = 'bootstrap';
    SELECT * INTO STRICT t FROM synchro.synced_table WHERE table_id = tid;
    SELECT ARRAY(SELECT unnest(rel.columns)::text EXCEPT SELECT unnest(t.sync_columns)::text) INTO STRICT unsynced
    FROM synchro.relation rel WHERE rel.relation_id = t.relation_id;
    PERFORM set_config('synchro.projection_generation', r.target_generation::text, true);
    -- Emptied by TRUNCATE, not DELETE: the baseline is one transaction, so the
    -- dead rows of every earlier chunk would stay in the table and each later
    -- chunk's scans would read them all (a chunk took twice as long by the
    -- end of a million-row table).
    CREATE TEMP TABLE IF NOT EXISTS synchro_stage_chunk (key text, image jsonb, version text) ON COMMIT DROP;
    TRUNCATE synchro_stage_chunk;
    -- Two statements, so that each is planned as a range scan of the
    -- projection's primary key; each row's head is looked up once, and a
    -- bootstrap's headless row gets its minted version in the same pass.
    IF after_key IS NULL THEN
        INSERT INTO synchro_stage_chunk (key, image, version)
        SELECT c.key, c.image, coalesce((SELECT h.version FROM synchro.row_head h WHERE h.relation_id = t.relation_id AND h.key = c.key),
                                        CASE WHEN bootstrap THEN synchro.mint_version() END)
        FROM (SELECT p.key, p.image FROM synchro.projection p
              WHERE p.relation_id = t.relation_id AND p.stream_generation = r.target_generation
              ORDER BY p.key LIMIT max_rows) c;
    ELSE
        INSERT INTO synchro_stage_chunk (key, image, version)
        SELECT c.key, c.image, coalesce((SELECT h.version FROM synchro.row_head h WHERE h.relation_id = t.relation_id AND h.key = c.key),
                                        CASE WHEN bootstrap THEN synchro.mint_version() END)
        FROM (SELECT p.key, p.image FROM synchro.projection p
              WHERE p.relation_id = t.relation_id AND p.stream_generation = r.target_generation AND p.key > after_key
              ORDER BY p.key LIMIT max_rows) c;
    END IF;
    GET DIAGNOSTICS staged = ROW_COUNT;
    IF staged = 0 THEN
        RETURN;
    END IF;
    SELECT count(*) INTO headless FROM synchro_stage_chunk c WHERE c.version IS NULL;
    IF headless > 0 THEN
        RAISE EXCEPTION 'synchro: % synced rows have no version (written before their table was registered); a reset cannot stage them', headless
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO synchro.row_version (version, table_id, key, image, checksum, stream_generation, commit_lsn, event_ordinal)
    SELECT w.version, tid, w.key, w.wire, synchro.row_checksum(tid, w.key, w.wire), r.target_generation, r.baseline_lsn, 0
    FROM (SELECT c.version, c.key, c.image - unsynced AS wire FROM synchro_stage_chunk c OFFSET 0) w;
    IF NOT bootstrap THEN
        INSERT INTO synchro.membership (stream_generation, scope, table_id, key, from_lsn)
        SELECT r.target_generation, s, tid, c.key, r.baseline_lsn
        FROM synchro_stage_chunk c
        CROSS JOIN LATERAL synchro.scopes_of(t.scope_rule, c.key, c.image, false) s;
    END IF;
    last_key := (SELECT max(c.key) FROM synchro_stage_chunk c);
END
$$;
