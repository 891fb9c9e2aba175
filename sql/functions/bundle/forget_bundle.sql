-- synchro.forget_bundle: statement trigger on goose's version table
-- (synchro.goose_db_version, as internal/migrate names it). The function bundle
-- stands on the schema the migrations made, and a migration applied or rolled
-- back afterwards may change or drop what it stands on (a Down section drops
-- with CASCADE, taking the bundle's views and functions over what it drops).
-- So whenever the applied migrations change, by synchroctl migrate or by the
-- goose command, the installed bundle is forgotten in the same transaction:
-- synchrod refuses the database (migrate.Check) and readiness reports no
-- function bundle until synchroctl migrate installs it again.
CREATE OR REPLACE FUNCTION synchro.forget_bundle()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM synchro.function_bundle;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER synchro_forget_bundle
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON synchro.goose_db_version
    FOR EACH STATEMENT EXECUTE FUNCTION synchro.forget_bundle();
