-- synchro.scope_diff: the scope updates of a connect or pull answer: {"add": the
-- assigned scopes the client did not name, each with cursor null, "remove": the
-- scopes it named that are not assigned}, both sorted. Computed against what the
-- request names, so a client that missed an earlier answer still converges.
CREATE OR REPLACE FUNCTION synchro.scope_diff(assigned text[], named jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'add', coalesce((SELECT jsonb_agg(jsonb_build_object('id', a, 'cursor', NULL) ORDER BY a COLLATE "C")
                         FROM unnest(assigned) a WHERE NOT named ? a), '[]'),
        'remove', coalesce((SELECT jsonb_agg(k ORDER BY k COLLATE "C")
                            FROM jsonb_object_keys(named) k WHERE k <> ALL (assigned)), '[]'))
$$;
