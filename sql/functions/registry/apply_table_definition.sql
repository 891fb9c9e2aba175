-- synchro.apply_table_definition: makes definition (wire name, compiled scope
-- rule, synced columns, push policy, time columns and the registering call's
-- arguments, as synchro.reconfigure_table validated them) synced table tid's.
-- Only a reconfiguration's activation (synchro.activate_bootstrap), or a
-- reconfiguration while capture is blocked, calls it.
CREATE OR REPLACE FUNCTION synchro.apply_table_definition(tid integer, definition jsonb)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE synchro.synced_table t
    SET name = definition ->> 'name', scope_rule = definition -> 'scope_rule',
        sync_columns = ARRAY(SELECT jsonb_array_elements_text(definition -> 'sync_columns'))::name[],
        push_policy = definition ->> 'push_policy', updated_at_column = definition ->> 'updated_at_column',
        deleted_at_column = definition ->> 'deleted_at_column', registered_input = definition -> 'registered_input'
    WHERE t.table_id = tid
$$;
