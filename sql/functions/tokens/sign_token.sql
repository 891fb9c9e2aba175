-- synchro.sign_token: an opaque, signed token for kind and parts (scope cursors
-- "c", rebuild sessions "r"): base64url of the JSON payload [kind, parts...], a
-- dot, and base64url of the first 16 bytes of its HMAC-SHA256 under
-- synchro.cursor_key. Clients never parse it; synchro.read_token verifies it.
CREATE OR REPLACE FUNCTION synchro.sign_token(kind text, parts text[])
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT translate(encode(convert_to(p, 'UTF8'), 'base64'), E'+/=\n', '-_') || '.' ||
           translate(encode(substr(synchro.hmac(convert_to(p, 'UTF8'), k.key, 'sha256'), 1, 16), 'base64'), E'+/=\n', '-_')
    FROM (SELECT (to_jsonb(kind) || to_jsonb(parts))::text AS p) payload, synchro.cursor_key k
$$;
