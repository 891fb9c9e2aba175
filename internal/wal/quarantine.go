package wal

import (
	"context"
	"fmt"

	"github.com/synchro-sync/synchro/internal/capture"
)

// decodeFailure quarantines the transaction being assembled when a message
// cannot be decoded; without one it is a session failure.
func (s *stream) decodeFailure(ctx context.Context, err error) error {
	open := s.asm.Open()
	if open == nil {
		return err
	}
	// Transactions completed before it are materialized first.
	if len(s.batch) > 0 {
		if ferr := s.flush(ctx, false); ferr != nil {
			return ferr
		}
	}
	if ferr := s.drain(ctx); ferr != nil {
		return ferr
	}
	open.EndLSN = open.CommitLSN
	return s.quarantine(ctx, open, &capture.Failure{Class: capture.ClassDecode, Detail: err.Error()}, "")
}

// quarantine writes the redacted poison record and blocks the stream before txn.
func (s *stream) quarantine(ctx context.Context, txn *capture.Txn, f *capture.Failure, sqlstate string) error {
	var rel *int64
	if f.RelationID != 0 {
		rel = &f.RelationID
	}
	var state *string
	if sqlstate != "" {
		state = &sqlstate
	}
	// Blocked, and the heartbeat row saying so, before the record is durable:
	// no heartbeat may report streaming once it is (the session's end would set
	// the state only later, and a periodic heartbeat may have read the state
	// just before).
	s.w.setState("blocked")
	if err := s.w.recordHeartbeat(ctx); err != nil {
		return fmt.Errorf("record heartbeat before the poison record: %w", err)
	}
	var id int64
	err := s.w.pool.QueryRow(ctx, `SELECT synchro.quarantine($1::pg_lsn, $2::pg_lsn, $3, $4, $5, $6)`,
		txn.CommitLSN.String(), txn.EndLSN.String(), int64(txn.Xid), f.Class, state, rel).Scan(&id)
	if err != nil {
		return fmt.Errorf("record poison: %w", err)
	}
	s.w.cfg.Log.Error("stream blocked by poison transaction", "worker", s.w.cfg.WorkerID, "poison_id", id,
		"commit_lsn", txn.CommitLSN.String(), "class", f.Class, "relation_id", f.RelationID, "sqlstate", sqlstate)
	return errPoison
}
