-- synchro.read_token: the parts of a token made by synchro.sign_token for kind,
-- or NULL when the token is malformed, of another kind, or its signature does not
-- verify (any edited byte). Never raises on client input.
CREATE OR REPLACE FUNCTION synchro.read_token(kind text, token text)
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    payload jsonb;
    parts text[];
BEGIN
    IF token IS NULL OR length(token) > 4096 OR token !~ '^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$' THEN
        RETURN NULL;
    END IF;
    payload := convert_from(decode(rpad(translate(split_part(token, '.', 1), '-_', '+/'),
                                        (length(split_part(token, '.', 1)) + 3) / 4 * 4, '='), 'base64'), 'UTF8')::jsonb;
    parts := ARRAY(SELECT e FROM jsonb_array_elements_text(payload) WITH ORDINALITY AS x(e, n) WHERE n > 1 ORDER BY n);
    -- Re-signing the parts reproduces the token only for the canonical payload of
    -- this kind and the right signature.
    IF synchro.sign_token(kind, parts) IS DISTINCT FROM token THEN
        RETURN NULL;
    END IF;
    RETURN parts;
EXCEPTION WHEN data_exception OR character_not_in_repertoire OR untranslatable_character THEN
    RETURN NULL;
END
$$;
