-- synchro.configure_client_retention: how long a client not seen, and a
-- recorded push outcome, are kept before the worker prunes them
-- (synchro.prune_clients); NULL keeps them for good. Default 90 days.
CREATE OR REPLACE FUNCTION synchro.configure_client_retention(keep interval)
RETURNS void
LANGUAGE plpgsql
-- Definer: the operator role sets it without rights on the settings table.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF keep < interval '0' THEN
        RAISE EXCEPTION 'synchro: the client retention must not be negative' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE synchro.settings s SET client_retention = keep;
END
$$;
