// Package httpapi is Synchro's HTTP layer: routing, connection and time bounds
// (server.go), authentication of each request (through internal/auth), per-user
// bounds on requests and request bytes in flight (limiter.go), the checks of a
// request body (request.go, through internal/strictjson), the readiness gate of
// pull and rebuild (gate.go), /readyz (readyz.go), and the translation between
// HTTP and the SQL entry points (sync.go, errors.go).
//
// It holds no sync logic of its own: every decision of the protocol (what a
// push applies or refuses, what a pull delivers, which scopes a user holds) is
// taken by the SQL entry points it calls through internal/db (sql/queries),
// acting as the least-privileged synchro_service role. It must not run SQL of
// its own beyond those queries. A refusal raised in SQL (SQLSTATE SY<status>)
// becomes the protocol's error answer; any other database error is a 500 whose
// body and log line carry no SQL text, row data or secrets.
package httpapi
