// Package client is the Go client SDK of Synchro: a local SQLite replica of the
// scopes the server assigns to a user, kept in sync over the wire protocol v3
// (docs/protocol.md).
//
// The application reads and writes the synced tables with plain SQL through
// DB(). SQLite triggers capture every local insert, update and delete into a
// durable queue; Sync pushes that queue, pulls the server's changes for every
// scope, rebuilds scopes the server (or a checksum mismatch) asks to rebuild,
// and verifies the scope checksums. Rows the SDK applies from the server are
// not captured. A local change the server refuses is recorded (Rejections) and
// the row reverted to its server state; changes of the row made while that
// change was in flight stay queued, and the next push has the server answer
// them on their own.
//
// Synchro's own state lives in side tables named _synchro_*; applications must
// not write them.
package client
