package wal

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/db"
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
		if ferr := s.flush(ctx, false, false); ferr != nil {
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
	if s.w.cfg.Stage != nil {
		// A stage records no poison: the catch-up fails, the active stream
		// stays as it is, and the reset is aborted or started again.
		return fmt.Errorf("%w: transaction %s (xid %d) cannot be materialized in the stage: %s %s (SQLSTATE %s)",
			errStageFailed, txn.CommitLSN, txn.Xid, f.Class, f.Detail, sqlstate)
	}
	// Blocked, and the heartbeat row saying so, before the record is durable:
	// no heartbeat may report streaming once it is (the session's end would set
	// the state only later, and a periodic heartbeat may have read the state
	// just before).
	s.w.setState("blocked")
	if err := s.w.recordHeartbeat(ctx); err != nil {
		return fmt.Errorf("record heartbeat before the poison record: %w", err)
	}
	id, err := db.New(s.w.pool).Quarantine(ctx, db.QuarantineParams{CommitLsn: txn.CommitLSN.String(), EndLsn: txn.EndLSN.String(),
		Xid: int64(txn.Xid), Class: f.Class, Sqlstate: pgtype.Text{String: sqlstate, Valid: sqlstate != ""},
		RelationID: pgtype.Int8{Int64: f.RelationID, Valid: f.RelationID != 0}})
	if err != nil {
		return fmt.Errorf("record poison: %w", err)
	}
	s.w.cfg.Log.Error("stream blocked by poison transaction", "worker", s.w.cfg.WorkerID, "poison_id", id,
		"commit_lsn", txn.CommitLSN.String(), "class", f.Class, "relation_id", f.RelationID, "sqlstate", sqlstate)
	return errPoison
}
