// Package capture turns the logical replication stream into materialized
// transactions: it assembles pgoutput messages into whole committed source
// transactions (txn.go, row.go, spill.go), parses strictly what the fence
// triggers and registry changes put into the WAL as transactional logical
// messages (fence.go: a malformed message is a blocking capture failure, never
// guessed at), and prepares each transaction for materialization (prepare.go:
// registry resolution, registry.go; pairing with fences, pair.go; column
// checks; row images, image.go; spilled images) before it materializes a batch
// and names the transaction and relation a failure belongs to
// (materialize.go). batch.go is the Go side of the materialization contract
// (the batch JSON and the scratch table's columns).
//
// It must not read or acknowledge the replication slot, write poison records
// or decide when a batch is due (package wal does), and it never puts row
// values into an error text.
package capture
