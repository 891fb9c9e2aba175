-- synchro.record_registry_change: records a registry change the capture
-- worker activates in source order (synchro.activate_bootstrap): a
-- stream_reset of kind bootstrap applying registration ({"op": "register"},
-- {"op": "reconfigure", "table_id", "definition"} or {"op": "unregister",
-- "relation_id"}) and returns its id. With relations to stage (staged), it
-- starts in phase staging, named by its candidate slot before the slot exists,
-- and its coordinator stages them and writes its barrier; with none, it is
-- ready at once and its barrier is the caller's own transaction (its xid is
-- recorded and the barrier message emitted here). Refused (55006) while a
-- stream reset or another bootstrap is in progress.
CREATE OR REPLACE FUNCTION synchro.record_registry_change(staged bigint[], registration jsonb)
RETURNS uuid
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id uuid := gen_random_uuid();
    prog synchro.progress;
    names text := (SELECT string_agg(r.schema_name || '.' || r.relation_name, ', ' ORDER BY r.relation_id)
                   FROM synchro.relation r WHERE r.relation_id = ANY (staged));
BEGIN
    IF EXISTS (SELECT FROM synchro.stream_reset r WHERE r.phase IN ('staging', 'catching_up', 'ready')) THEN
        RAISE EXCEPTION 'synchro: a stream reset or a projection bootstrap is in progress; change the registry after it is activated or aborted (synchroctl reset status)'
            USING ERRCODE = 'object_in_use';
    END IF;
    SELECT * INTO prog FROM synchro.progress;
    INSERT INTO synchro.stream_reset (reset_id, kind, relation_ids, registration, reason, candidate_slot, source_generation, source_slot,
                                      phase, barrier_xid, verified_at)
    VALUES (id, 'bootstrap', staged, registration,
            left(coalesce(registration ->> 'op', 'register') || coalesce(' of ' || names, ' of ' || (registration ->> 'relation')), 200),
            'synchro_boot_' || left(replace(id::text, '-', ''), 20), prog.stream_generation, prog.slot_name,
            CASE WHEN staged = '{}' THEN 'ready' ELSE 'staging' END,
            CASE WHEN staged = '{}' THEN pg_current_xact_id() END,
            CASE WHEN staged = '{}' THEN now() END);
    IF staged = '{}' THEN
        PERFORM pg_logical_emit_message(true, 'synchro.reset', id::text);
    END IF;
    RETURN id;
END
$$;
