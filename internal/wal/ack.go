package wal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/dberr"
)

// statusBeat is how often the stream tells the server it is alive while it
// does not read: the server ends a session that sent nothing for
// wal_sender_timeout (60 s by default), and preparing a transaction of a
// million row events, or waiting for its materialization, takes longer.
const statusBeat = time.Second

// alive runs fn, which must not use the replication connection, while another
// goroutine sends a standby status update with the durable acknowledgement
// every statusBeat; that goroutine has ended when alive returns.
func (s *stream) alive(ctx context.Context, fn func() error) error {
	stop, ended := make(chan struct{}), make(chan error, 1)
	go func() {
		t := time.NewTicker(statusBeat)
		defer t.Stop()
		for {
			select {
			case <-stop:
				ended <- nil
				return
			case <-t.C:
				if err := s.sendStatus(ctx, s.ack, false); err != nil {
					ended <- err
					return
				}
			}
		}
	}()
	err := fn()
	close(stop)
	if beatErr := <-ended; err == nil {
		err = beatErr
	}
	return err
}

// acknowledge advances the slot to a processed boundary already recorded, waits
// until the slot has taken it, then records the acknowledgement. Recording
// waits for the progress row as materialization does, whatever timeouts the
// database's sessions have (untimed): a lock_timeout failed the session while
// another session held the row.
func (s *stream) acknowledge(ctx context.Context, boundary pglogrepl.LSN) error {
	if boundary <= s.ack {
		return nil
	}
	if err := s.sendStatus(ctx, boundary, false); err != nil {
		return err
	}
	// The slot takes the position from this session's WAL sender; once that has
	// let go of the slot (its connection failed), nothing will confirm it.
	deadline := time.Now().Add(30 * time.Second)
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 10*time.Millisecond) {
		var confirmed string
		var held bool
		if err := s.w.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, active_pid IS NOT DISTINCT FROM $2 FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database()`, s.w.getSlot(), int32(s.conn.PID())).Scan(&confirmed, &held); err != nil {
			return fmt.Errorf("read slot position: %w", err)
		}
		if lsn, err := pglogrepl.ParseLSN(confirmed); err == nil && lsn >= boundary {
			break
		}
		if !held {
			return fmt.Errorf("the replication connection let go of the slot before it confirmed %s", boundary)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot did not confirm %s within 30s", boundary)
		}
		time.Sleep(pause)
	}
	if err := s.w.step(StepSlotAdvanced); err != nil {
		return err
	}
	if err := s.w.recordAcknowledgement(ctx, boundary); err != nil {
		return err
	}
	s.ack = boundary
	return s.w.step(StepAcknowledged)
}

// recordAcknowledgement records the slot's position as the durable
// acknowledgement (synchro.record_acknowledgement), waiting for the progress
// row as materialization does (untimed).
func (w *Worker) recordAcknowledgement(ctx context.Context, lsn pglogrepl.LSN) error {
	return w.untimed(ctx, nil, `SELECT synchro.record_acknowledgement($1::pg_lsn, $2)`, lsn.String(), w.staged())
}

func (s *stream) sendStatus(ctx context.Context, pos pglogrepl.LSN, reply bool) error {
	s.lastStatus = time.Now()
	return pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos, ReplyRequested: reply,
	})
}

// checkSlot requires the slot to equal the durable acknowledgement before more
// WAL is materialized; a mismatch blocks the worker.
func (s *stream) checkSlot(ctx context.Context) error {
	p, err := s.w.readPositions(ctx)
	if err != nil {
		return err
	}
	if p.problem != "" {
		return fmt.Errorf("%w: %s", errBlocked, p.problem)
	}
	if p.slot != p.ack || p.ack != s.ack {
		return fmt.Errorf("%w: slot position %s differs from the durable acknowledgement %s", errBlocked, p.slot, p.ack)
	}
	return nil
}

// maybeIdle starts an idle acknowledgement when the stream has been quiet: it
// reads the WAL flush position first, then asks the server for a keepalive. If
// the keepalive reports that everything up to that position was sent and no data
// arrived meanwhile, idleAck acknowledges it.
func (s *stream) maybeIdle(ctx context.Context) error {
	if s.idleTarget != 0 || len(s.batch) > 0 || s.inflight != nil || s.asm.Open() != nil || time.Since(s.lastData) < s.w.cfg.IdleAckInterval {
		return nil
	}
	flush, err := db.New(s.w.pool).CurrentFlushLSN(ctx)
	if err != nil {
		return err
	}
	target, err := pglogrepl.ParseLSN(flush.FlushLsn)
	if err != nil {
		return err
	}
	s.lastData = time.Now() // next idle attempt after another quiet interval
	if target <= s.ack {
		return nil
	}
	s.idleTarget, s.idleTargetAt = target, flush.ReadAt.Time
	return s.sendStatus(ctx, s.ack, true)
}

func (s *stream) idleAck(ctx context.Context) error {
	target := s.idleTarget
	s.idleTarget = 0
	if len(s.batch) > 0 || s.inflight != nil || s.asm.Open() != nil {
		return nil
	}
	// Catalog drift (a dropped registered relation, say): acknowledge nothing,
	// but keep streaming, so that a decoded transaction carrying drift (a
	// recreated table added to the publication) is still quarantined with its
	// identity; the next batch without one blocks the stream (flush).
	if err := s.w.catalogDrift(ctx); errors.Is(err, errBlocked) {
		return nil
	} else if err != nil {
		return err
	}
	if err := s.checkSlot(ctx); err != nil {
		return err
	}
	// record_processed refuses (55000) while any poison transaction is unresolved,
	// also one recorded a moment ago by another session or waiting for its retry:
	// then nothing is acknowledged and the stream goes on, as it does for a poison
	// it has not reached. Like the acknowledgement, it waits for the progress row.
	s.w.cfg.Log.Debug("idle acknowledgement", "worker", s.w.cfg.WorkerID, "target", target.String())
	if err := s.w.untimed(ctx, nil, `SELECT synchro.record_processed($1::pg_lsn, $2, $3)`, target.String(), s.idleTargetAt, s.w.staged()); err != nil {
		if dberr.Classify(err) == dberr.Permanent {
			s.w.cfg.Log.Debug("idle acknowledgement withheld: a poison transaction is unresolved", "worker", s.w.cfg.WorkerID)
			return nil
		}
		return err
	}
	return s.acknowledge(ctx, target)
}
