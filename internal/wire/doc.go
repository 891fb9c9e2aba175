// Package wire renders PostgreSQL values in Synchro's wire form: the typed JSON
// of row images that pull delivers and push answers with (numbers, booleans,
// JSON, RFC 3339 UTC timestamps, base64 bytes, else strings). Captured WAL
// tuples and push's server rows are both rendered here, so one row state has one
// rendering whichever path produced it.
//
// It also reads and writes JSON nested deeper than encoding/json allows
// (nested.go), as PostgreSQL's json and jsonb hold it. The package is pure: it
// does no I/O and knows nothing of tables, scopes or the protocol's requests.
package wire
