// Package strictjson checks that a JSON document means one thing to every
// parser and fits what PostgreSQL's jsonb holds: request bodies of the sync
// API and the payloads of JWTs are checked by it before they are decoded.
//
// It only checks (depth, a member named twice, NUL characters, surrogates and
// numbers jsonb cannot hold) and never decodes: the caller decodes a document
// that passed.
package strictjson
