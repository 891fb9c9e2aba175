-- At every function bundle install: the generated capture functions of every
-- registered relation made again from this bundle's generators
-- (synchro.install_capture_functions), in the install's transaction, so that a
-- fence or key guard never runs code of an earlier bundle once this one is
-- installed (readiness compares them with the generators' output).
DO $$
DECLARE
    rid bigint;
BEGIN
    FOR rid IN SELECT r.relation_id FROM synchro.relation r ORDER BY r.relation_id LOOP
        PERFORM synchro.install_capture_functions(rid);
    END LOOP;
END
$$;
