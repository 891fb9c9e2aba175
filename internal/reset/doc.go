// Package reset coordinates a stream reset (docs/change-stream.md, "Stream
// reset"): a new stream generation built from a causally bound baseline, the
// way out of a block that retrying cannot repair (a decoded TRUNCATE, a poison
// transaction, a lost slot or publication).
//
// Run drives the phases in the foreground, resuming a reset that a dead
// coordinator left where its durable state allows:
//
//   - staging: a permanent candidate slot is created with an exported
//     snapshot over a replication connection that issues nothing else until
//     the baseline transaction imported it; under that snapshot every
//     registered relation's rows are rendered as capture renders decoded rows
//     (baseline.go) and the baseline is completed in SQL
//     (synchro.stage_baseline) before one commit;
//   - catching_up: the barrier transaction is written, and package wal's
//     staged catch-up consumes the candidate slot into the stage through it;
//   - ready: the stage is verified (synchro.verify_reset);
//   - activated: with Config.Activate, synchro.activate_reset switches the
//     active generation and slot in one transaction.
//
// A reset found in staging (its baseline never committed, its exported
// snapshot gone with its connection) is discarded with its slot and started
// again with a new candidate; one catching up resumes from its slot's durable
// acknowledgement. Retirement and abort are single SQL calls
// (synchro.retire_reset, synchro.abort_reset).
package reset
