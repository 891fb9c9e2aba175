// Package auth identifies the user of a sync API request.
//
// Two modes, chosen by --auth-mode (env SYNCHRO_AUTH_MODE), are mutually exclusive:
//
//   - "jwt": the request carries "Authorization: Bearer <token>". The token is
//     verified with one of: an HS256 secret (--jwt-hs256-secret), a PEM public key
//     (--jwt-public-key-file: RSA for RS256, EC P-256 for ES256), or the keys a
//     JWKS endpoint publishes (--jwt-jwks-url: RS256 and ES256 keys, chosen by
//     the token's "kid", fetched again periodically and when an unknown "kid"
//     arrives, at most once per --jwt-jwks-unknown-kid-interval; the cached keys
//     are kept while the endpoint is down). Only the algorithms of the configured
//     keys are accepted. The token must carry "exp"; "exp", "nbf" and "iat" are
//     checked with a leeway of [Leeway] (an "iat" in the future is refused), and
//     its lifetime (exp minus iat, or minus now without iat) must not exceed
//     --jwt-max-lifetime. "iss" and "aud" are required to match --jwt-issuer and
//     --jwt-audience when those are set. A token whose header or payload names a
//     member twice ({"sub":"alice","sub":"bob"}) is refused, as request bodies are.
//     The user id is the string claim named by --jwt-user-claim (default "sub").
//   - "trusted-header": a product API in front of Synchro has authenticated the
//     request and passes the user id in a header (--trusted-user-header). It can
//     also be required to send a shared secret in another header
//     (--trusted-secret-header, --trusted-secret), compared in constant time;
//     without one, synchrod listens only on a loopback address (CheckListen).
//
// A user id is at most [MaxUserIDLen] bytes, so that a scope id built from it
// (user:<id>) stays within the 256-byte limit of scope ids in requests.
//
// Every error [Authenticator.User] returns matches [ErrUnauthenticated] and has a
// short message that is safe to send to the client: it never contains the token,
// a secret, the user id, or a parser's description of the token's contents.
//
// The package names the user and nothing more: which scopes a user holds and
// which rows the user may write are decided in SQL (scope rules and write
// policies). It does not read request bodies, and it keeps no state per user
// beyond the JWKS key cache.
package auth
