// Command synchrod is the Synchro server: the HTTP sync API and the WAL capture
// worker over one PostgreSQL database.
//
// main.go reads the flags (internal/config, each with its environment
// variable), refuses to start on a database whose schema version or function
// bundle digest is not this build's (internal/migrate.Check), records this
// instance's readiness and protocol limits in the database, opens the pools
// (the sync requests', the operator endpoints' and the worker's), then serves
// HTTP (internal/httpapi, internal/metrics) and runs the capture worker
// (internal/wal) until a signal or a failure stops them. It wires packages
// together and holds no logic of its own: no migration, no SQL beyond the
// startup statements of sql/queries.
package main
