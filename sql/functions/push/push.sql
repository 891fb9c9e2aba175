-- synchro.push: POST /sync/push (docs/protocol.md) for user_id. Applies the
-- mutations in request order, each through synchro.apply_mutation in its own
-- savepoint, idempotent by (client_id, mutation_id): the outcome is recorded in
-- the write's transaction, and a replay (also a concurrent one, which waits for
-- the first; server_retryable when that wait times out or deadlocks) returns it
-- and writes nothing again. A mutation whose contents differ from those recorded
-- under its mutation_id is validation_failed. server_retryable outcomes are not
-- recorded. An unknown or foreign client, a stale schema, or a stream the worker
-- has not started (503 not_ready: a write before it would never be decoded)
-- refuses the whole request. Writes and fences only, no pull-visible effect.
-- Applied outcomes carry server_row_text (rendered by the HTTP layer) up to
-- row_bytes in all (always the first), later ones server_row_omitted; the
-- outcome recorded for replays omits a row over 64 KiB the same way
-- (docs/decisions.md, "Bounded pages and push answers"). Conflicts and
-- rejections keep their rows.
DROP FUNCTION IF EXISTS synchro.push(text, jsonb);
CREATE OR REPLACE FUNCTION synchro.push(user_id text, request jsonb, row_bytes bigint)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Text output of row values (server_row_text) in the wire's canonical form.
SET DateStyle = 'ISO, YMD'
SET TimeZone = 'UTC'
SET IntervalStyle = 'postgres'
SET extra_float_digits = 1
SET bytea_output = 'hex'
-- Every statement of the mutations' validation and writes runs once per
-- mutation with other parameters. PL/pgSQL kept planning many of them again for
-- each (a custom plan looks cheaper once a scope rule's branches fold away):
-- about a fifth of a warm 50-mutation push (78 ms down to 69 here). Generic
-- plans are made once per session; sql scope rules are checked to plan
-- generically at registration (synchro.check_rule_query).
SET plan_cache_mode = 'force_generic_plan'
AS $$
DECLARE
    c synchro.client := synchro.client_session(user_id, request, false);
    m jsonb;
    digest text;
    recorded synchro.mutation;
    res jsonb;
    claimed boolean;
    -- Outcomes gather in arrays (appended in place), not in growing jsonb
    -- values that every append would copy whole.
    row_text_bytes bigint := 0; -- server_row_text in the answer's applied outcomes
    accepted jsonb[] := '{}';
    rejected jsonb[] := '{}';
BEGIN
    -- The worker records the progress row only once it has created the slot,
    -- so a push that sees the row commits after the stream's start.
    IF NOT EXISTS (SELECT FROM synchro.progress) THEN
        PERFORM synchro.refuse(503, 'not_ready', 'capture has not started yet; retry later');
    END IF;
    FOR m IN SELECT value FROM jsonb_array_elements(request -> 'mutations') LOOP
        claimed := NULL;
        res := NULL;
        digest := md5(jsonb_build_array(m -> 'table', m -> 'op', m -> 'pk', m -> 'columns', m -> 'base_version')::text);
        BEGIN
            INSERT INTO synchro.mutation (client_id, mutation_id, batch_id, digest)
            VALUES (c.client_id, m ->> 'mutation_id', request ->> 'batch_id', digest)
            ON CONFLICT (client_id, mutation_id) DO NOTHING
            RETURNING true INTO claimed;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            -- Waiting for a concurrent push of the same mutation timed out or
            -- deadlocked (pushes carrying the same mutations in other orders):
            -- retryable, and not recorded.
            res := jsonb_build_object('mutation_id', m ->> 'mutation_id', 'table', m ->> 'table', 'pk', m -> 'pk',
                                      'status', 'retry', 'code', 'server_retryable',
                                      'message', 'the mutation is being applied by another request; retry the mutation');
        END;
        IF res IS NULL AND claimed THEN
            res := synchro.apply_mutation(c, user_id, m);
            IF res ->> 'status' = 'retry' THEN
                DELETE FROM synchro.mutation WHERE client_id = c.client_id AND mutation_id = m ->> 'mutation_id';
            ELSE
                UPDATE synchro.mutation
                SET outcome = CASE WHEN res ->> 'status' = 'applied' AND octet_length(res ->> 'server_row_text') > 65536
                                   THEN (res - 'server_row_text') || '{"server_row_omitted": true}' ELSE res END
                WHERE client_id = c.client_id AND mutation_id = m ->> 'mutation_id';
            END IF;
        ELSIF res IS NULL THEN -- a replay: the recorded outcome, if it is the same mutation
            SELECT * INTO recorded FROM synchro.mutation x WHERE x.client_id = c.client_id AND x.mutation_id = m ->> 'mutation_id';
            res := recorded.outcome;
            IF recorded.digest <> digest THEN -- (no digest: recorded before 00019)
                res := jsonb_build_object('mutation_id', m ->> 'mutation_id', 'table', m ->> 'table', 'pk', m -> 'pk',
                                          'status', 'rejected', 'code', 'validation_failed',
                                          'message', 'mutation_id already names another mutation of this client (its table, op, pk, columns or base_version differ); send a new change under a new mutation_id');
            END IF;
        END IF;
        IF res ->> 'status' = 'applied' THEN
            IF res ? 'server_row_text' THEN
                IF row_text_bytes > 0 AND row_text_bytes + coalesce(octet_length(res ->> 'server_row_text'), 0) > row_bytes THEN
                    res := (res - 'server_row_text') || '{"server_row_omitted": true}';
                ELSE
                    row_text_bytes := row_text_bytes + greatest(coalesce(octet_length(res ->> 'server_row_text'), 0), 1);
                END IF;
            END IF;
            accepted := array_append(accepted, res);
        ELSE
            rejected := array_append(rejected, res);
        END IF;
    END LOOP;
    RETURN jsonb_build_object('server_time', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                              'accepted', to_jsonb(accepted), 'rejected', to_jsonb(rejected));
END
$$;
