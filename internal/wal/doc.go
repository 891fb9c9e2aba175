// Package wal is Synchro's capture worker: it holds the worker role, owns the
// replication slot and streams it (pgoutput, messages on), buffers each
// committed source transaction whole (capture.Assembler), batches them, hands
// each batch to package capture to prepare and materialize, and acknowledges
// the slot by the rules of docs/change-stream.md: processed boundary, then
// slot advance, then acknowledgement record; never past a poison transaction,
// which it quarantines.
//
// Files by job: worker.go (the worker, its sessions and heartbeat), slot.go
// (creating and reconciling the slot), stream.go (the receive loop),
// flush.go (batching and pipelining), ack.go (acknowledgement and status
// updates), quarantine.go (poison records), prune.go (history pruning).
//
// Its SQL is in sql/queries/worker.sql (sqlc) except what sqlc cannot
// express: the replication protocol's commands (START_REPLICATION,
// CREATE_REPLICATION_SLOT, through pglogrepl); the statements run behind
// synchro.lift_timeouts in one pgx batch and one implicit transaction
// (Worker.untimed: record_acknowledgement, record_processed, record_storage
// with record_enum_labels, prune_capture_history, prune_clients), which
// sqlc's one-statement methods cannot send together; the reads of
// pg_replication_slots, which sqlc's catalog does not have; and the reads of
// synchro.catalog_drift() and synchro.slot_problem(), whose PL/pgSQL result
// columns sqlc does not resolve.
//
// It must not decode, pair or render row events, nor build what
// synchro.materialize_transaction reads (package capture does), and it must
// not acknowledge a position before the batch ending there is durable.
package wal
