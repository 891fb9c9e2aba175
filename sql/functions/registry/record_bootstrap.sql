-- synchro.record_bootstrap: records a bootstrap (a stream_reset of kind
-- bootstrap, phase staging, its candidate slot named before it exists) of
-- every bootstrap_pending relation, and returns its id; NULL when no relation
-- is pending. A registration records its relations' first bootstrap
-- (synchro.begin_bootstrap); the coordinator records a new one after an
-- attempt was aborted, so that pending relations are always retried. Refused
-- (55006) while a stream reset or a bootstrap is in progress.
CREATE OR REPLACE FUNCTION synchro.record_bootstrap()
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rels bigint[];
    names text;
    id uuid := gen_random_uuid();
    prog synchro.progress;
BEGIN
    SELECT array_agg(r.relation_id ORDER BY r.relation_id), string_agg(r.schema_name || '.' || r.relation_name, ', ' ORDER BY r.relation_id)
    INTO rels, names
    FROM synchro.relation r WHERE r.bootstrap_pending;
    IF rels IS NULL THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT FROM synchro.stream_reset r WHERE r.phase IN ('staging', 'catching_up', 'ready')) THEN
        RAISE EXCEPTION 'synchro: a stream reset or a bootstrap is in progress; the bootstrap of % waits until it is activated or aborted', names
            USING ERRCODE = 'object_in_use';
    END IF;
    SELECT * INTO prog FROM synchro.progress;
    INSERT INTO synchro.stream_reset (reset_id, kind, relation_ids, reason, candidate_slot, source_generation, source_slot)
    VALUES (id, 'bootstrap', rels, left('bootstrap of ' || names, 200), 'synchro_boot_' || left(replace(id::text, '-', ''), 20),
            prog.stream_generation, prog.slot_name);
    RETURN id;
END
$$;
