-- synchro.retry_poison: operator request to retry a blocking poison transaction
-- after its cause was repaired. The worker re-runs the same source transaction
-- with the same replay identities; success resolves the record, failure keeps it.
CREATE OR REPLACE FUNCTION synchro.retry_poison(id bigint)
RETURNS boolean
LANGUAGE sql
-- Definer: the operator role may request a retry without rights on the table.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE synchro.poison_txn SET retry_requested_at = now()
    WHERE poison_id = id AND resolved_at IS NULL
    RETURNING true
$$;
