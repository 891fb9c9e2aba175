-- synchro.lift_timeouts: turns off, for the session or (is_local) the current
-- transaction, the timeouts an operator may set for the database's application
-- sessions: statement_timeout, lock_timeout, idle_in_transaction_session_timeout,
-- and transaction_timeout where the server has it (PostgreSQL 17 and later;
-- set_config of a setting the server does not know fails). The worker runs
-- materialization, pruning and its progress and catalog records under it: they
-- take as long as they take and wait for the locks they need. A statement's
-- statement_timeout is armed when the statement starts, so it binds the
-- statements after this call, not the one making it. The function's SET clause
-- restores search_path alone on return; the timeouts stay as it set them.
CREATE OR REPLACE FUNCTION synchro.lift_timeouts(is_local boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM set_config('statement_timeout', '0', is_local), set_config('lock_timeout', '0', is_local),
            set_config('idle_in_transaction_session_timeout', '0', is_local);
    IF current_setting('transaction_timeout', true) IS NOT NULL THEN
        PERFORM set_config('transaction_timeout', '0', is_local);
    END IF;
END
$$;
