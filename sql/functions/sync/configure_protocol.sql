-- synchro.configure_protocol: the lowest protocol version and app version (dotted
-- numbers, NULL = any) that connect accepts; below them connect answers 426
-- upgrade_required. synchrod sets them at startup from its configuration.
CREATE OR REPLACE FUNCTION synchro.configure_protocol(min_protocol_version integer, min_app_version text)
RETURNS void
LANGUAGE plpgsql
-- Definer: the operator role sets them without rights on the settings table.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF min_protocol_version IS NULL OR min_protocol_version < 1 OR min_protocol_version > 3 THEN
        RAISE EXCEPTION 'synchro: minimum protocol version must be between 1 and 3 (this server speaks 3)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF min_app_version !~ '^[0-9]+(\.[0-9]+)*$' THEN
        RAISE EXCEPTION 'synchro: minimum app version must be dotted numbers such as 1.4.0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE synchro.settings s
    SET min_protocol_version = configure_protocol.min_protocol_version, min_app_version = configure_protocol.min_app_version;
END
$$;
