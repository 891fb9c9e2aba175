-- synchro.connect: POST /sync/connect (docs/protocol.md). Negotiates the
-- protocol (426 upgrade_required below the minimum protocol or app version),
-- registers or resumes the client for user_id (409 when bound to another user),
-- returns the schema action (none | replace | rebuild_local) with the manifest
-- when the client must (re)create its tables, the current scope set and its
-- version, the scope diff against the client's known scopes, and the known
-- scopes whose cursor cannot be resumed by this client (rebuild; the rule of
-- synchro.read_scope_cursor, against the refreshed scope set). It never returns
-- row data.
-- Request shape and types are checked by the HTTP layer.
CREATE OR REPLACE FUNCTION synchro.connect(user_id text, request jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s synchro.settings;
    p synchro.progress;
    sch synchro.schema_version;
    client_hash text := request -> 'schema' ->> 'hash';
    old_manifest jsonb;
    action text;
    c synchro.client;
    known jsonb := coalesce(nullif(request -> 'known_scopes', 'null'), '{}');
    horizon pg_lsn;
    hw pg_lsn;
BEGIN
    SELECT * INTO STRICT s FROM synchro.settings;
    -- numeric: the HTTP layer passes any 64-bit integer, which need not fit integer.
    IF (request ->> 'protocol_version')::numeric < s.min_protocol_version THEN
        PERFORM synchro.refuse(426, 'upgrade_required',
            format('protocol version %s is not supported; the minimum is %s', request ->> 'protocol_version', s.min_protocol_version));
    END IF;
    IF s.min_app_version IS NOT NULL AND (CASE WHEN request ->> 'app_version' ~ '^[0-9]{1,9}(\.[0-9]{1,9})*$'
            THEN string_to_array(request ->> 'app_version', '.')::numeric[] < string_to_array(s.min_app_version, '.')::numeric[]
            ELSE true END) THEN
        PERFORM synchro.refuse(426, 'upgrade_required',
            format('app_version must be dotted numbers at least %s', s.min_app_version));
    END IF;

    sch := synchro.current_schema();
    IF client_hash = sch.hash THEN
        action := 'none';
    ELSIF client_hash IS NULL THEN
        action := 'replace';
    ELSE
        SELECT v.manifest INTO old_manifest FROM synchro.schema_version v WHERE v.hash = client_hash ORDER BY v.version DESC LIMIT 1;
        -- Tables only added or removed: replace. A table whose definition changed
        -- (or an unknown schema): the local data must be rebuilt.
        action := CASE WHEN old_manifest IS NOT NULL AND NOT EXISTS (
                            SELECT FROM jsonb_array_elements(old_manifest -> 'tables') o
                            JOIN jsonb_array_elements(sch.manifest -> 'tables') n ON n ->> 'name' = o ->> 'name'
                            WHERE n <> o)
                       THEN 'replace' ELSE 'rebuild_local' END;
    END IF;

    c := synchro.client_session(user_id, request, true);
    UPDATE synchro.client k SET platform = left(request ->> 'platform', 64), app_version = left(request ->> 'app_version', 64),
                                last_seen_at = now()
    WHERE k.client_id = c.client_id;

    -- The horizon first, once: it never passes a materialized transaction.
    horizon := synchro.history_horizon_lsn((SELECT x.stream_generation FROM synchro.progress x));
    SELECT * INTO p FROM synchro.progress;
    hw := coalesce(p.materialized_commit_lsn, '0/0');
    RETURN jsonb_build_object(
        'server_time', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
        'protocol_version', 3,
        'schema', jsonb_build_object('version', sch.version, 'hash', sch.hash, 'action', action),
        'scope_set_version', c.scope_set_version,
        'scopes', synchro.scope_diff(c.scope_set, known),
        'rebuild', coalesce((SELECT jsonb_agg(k ORDER BY k COLLATE "C")
                             FROM jsonb_object_keys(known) k
                             WHERE k = ANY (c.scope_set)
                               AND (action = 'rebuild_local' OR p.stream_generation IS NULL
                                    OR (synchro.read_scope_cursor(known -> k ->> 'cursor', p.stream_generation, c, k, hw, horizon)).lsn IS NULL)), '[]'))
        || CASE WHEN action IN ('replace', 'rebuild_local')
                THEN jsonb_build_object('schema_definition', sch.manifest || jsonb_build_object('version', sch.version, 'hash', sch.hash))
                ELSE '{}' END;
END
$$;
