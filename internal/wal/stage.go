package wal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/dberr"
)

// Stage is a stream reset's or a projection bootstrap's staged stream: its
// candidate slot is consumed from the consistent point into the target
// generation, with the code that materializes the active stream, until the
// barrier transaction.
type Stage struct {
	ResetID    string      // the reset or bootstrap whose barrier message ends the catch-up
	Generation pgtype.UUID // the target generation
	Slot       string      // the candidate slot
	// Relations, for a bootstrap, are the relations it stages: only their
	// events are materialized into the stage (nil: every relation's).
	Relations []int64
}

// errBarrier ends a stage's session once its barrier transaction is
// materialized and acknowledged.
var errBarrier = errors.New("reset barrier reached")

// errStageFailed ends a stage's catch-up: a transaction cannot be
// materialized in the stage (the reset is aborted or started again).
var errStageFailed = errors.New("staged catch-up failed")

// isBarrier reports whether txn carries the barrier of the worker's stage.
func (w *Worker) isBarrier(txn *capture.Txn) bool {
	return w.cfg.Stage != nil && txn.Barrier == w.cfg.Stage.ResetID
}

// CatchUp consumes a reset's candidate slot into its stage (cfg.Stage) through
// the reset's barrier: sessions that fail for a transient reason start again
// after RetryInterval from the stage's durable acknowledgement; it returns nil
// once the barrier is materialized, and an error when the stage cannot go on
// (a transaction that cannot be materialized in it, a slot that cannot be
// streamed) or ctx ends. The caller holds the reset lock.
func (w *Worker) CatchUp(ctx context.Context) error {
	if w.cfg.Stage == nil {
		return errors.New("CatchUp needs a stage")
	}
	for {
		done, err := w.stageDone(ctx)
		if err == nil && !done {
			err = w.session(ctx)
		}
		switch {
		case done, errors.Is(err, errBarrier):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrStopped), errors.Is(err, errStageFailed), errors.Is(err, errBlocked),
			dberr.Classify(err) != dberr.Transient:
			return err
		case err != nil:
			w.cfg.Log.Warn("staged catch-up session failed; retrying", "reset", w.cfg.Stage.ResetID, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.cfg.RetryInterval):
		}
	}
}

// stageDone reports whether the stage's barrier is materialized and
// acknowledged. A coordinator that died after the barrier's materialization
// may have left the slot advanced past it without the acknowledgement
// recorded, or the other way round: the slot is reconciled first (the same
// two legal windows as the capture stream's). A slot not yet advanced to the
// barrier streams it again, as a replay, and acknowledges it then.
func (w *Worker) stageDone(ctx context.Context) (bool, error) {
	end, err := db.New(w.pool).StageBarrierEnd(ctx, w.cfg.Stage.Generation)
	if err != nil || end == "" {
		return false, err
	}
	barrier, err := pglogrepl.ParseLSN(end)
	if err != nil {
		return false, err
	}
	ack, err := w.reconcileSlot(ctx)
	return err == nil && ack >= barrier, err
}

// resetHolds blocks the capture worker (errBlocked) while a stream reset is in
// progress: the old stream stays blocked from the reset's start until its
// activation (which switches the active slot this worker then streams) or its
// abort.
func (w *Worker) resetHolds(ctx context.Context) error {
	r, err := db.New(w.pool).CurrentReset(ctx)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && r.Kind != "reset") {
		return nil // a bootstrap holds only its own relations (capture.Preparer)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: stream reset %s is %s; the stream stays blocked until it is activated or aborted",
		errBlocked, r.ResetID, r.Phase)
}

// heldCheckInterval bounds how often a capture stream looks for a stream reset
// that began while it streams: it ends the session (blocked) within about that
// long, even when no transaction comes to be refused.
const heldCheckInterval = time.Second

// checkHeld ends the capture stream's session (errBlocked) once a stream reset
// is in progress; a stage's stream is never held.
func (s *stream) checkHeld(ctx context.Context) error {
	if s.w.cfg.Stage != nil || time.Since(s.heldChecked) < heldCheckInterval {
		return nil
	}
	s.heldChecked = time.Now()
	return s.w.resetHolds(ctx)
}
