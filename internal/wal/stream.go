package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/synchro-sync/synchro/internal/capture"
)

// stream is one streaming session over the replication connection: its
// receive loop (this file) assembles whole transactions and batches them
// (flush.go); capture prepares and materializes each batch; the stream then
// acknowledges it (ack.go) or quarantines the transaction that failed
// (quarantine.go).
type stream struct {
	w    *Worker
	conn *pgconn.PgConn
	ack  pglogrepl.LSN // durable acknowledgement == slot position

	asm    *capture.Assembler
	batch  []*capture.Txn
	events int       // row events in batch
	oldest time.Time // when the first transaction of the batch arrived

	// prep prepares batches in commit order; inflight is the batch being
	// materialized while the next one is received (nil when none).
	prep     *capture.Preparer
	inflight *inflight
	// mat is the session's one materialization connection, so that its cached
	// plans and scratch tables serve every batch.
	mat *capture.Materializer

	lastData   time.Time
	idleTarget pglogrepl.LSN // flush position read for an idle acknowledgement, 0 when none
	// idleTargetAt is when idleTarget was read: every transaction committed
	// before it is processed once idleTarget is (synchro.commit_lag).
	idleTargetAt time.Time
	lastStatus   time.Time
	// keepalive is when the server last sent a keepalive. It sends one when it
	// waits for WAL, so none since a batch began means it had WAL to send all
	// along: the worker is behind.
	keepalive time.Time
	catchUp   catchUp
	// heldChecked is when the capture stream last looked for a stream reset
	// holding it (checkHeld).
	heldChecked time.Time
}

func (s *stream) run(ctx context.Context) error {
	w := s.w
	var err error
	var only []int64
	if w.cfg.Stage != nil {
		only = w.cfg.Stage.Relations
	}
	if s.prep, err = capture.NewPreparer(ctx, w.pool, w.staged(), only); err != nil {
		return err
	}
	s.prep.Log = w.cfg.Log
	s.asm = capture.NewAssembler()
	s.asm.SpillAbove(w.cfg.SpillBytes, w.cfg.SpillDir)
	defer s.asm.Reset()
	defer func() { release(s.batch) }()
	if s.mat, err = capture.NewMaterializer(ctx, w.pool, w.staged()); err != nil {
		return err
	}
	defer s.mat.Close()
	defer s.abandon()
	err = pglogrepl.StartReplication(ctx, s.conn, w.getSlot(), s.ack, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", strings.ReplaceAll(w.cfg.Publication, "'", "''")), "messages 'true'"},
	})
	if err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	w.setState("streaming")
	s.lastData = time.Now()
	// Each receive waits under a read deadline on the connection rather than a
	// context of its own: a context and a timer per message were 15-40% of the
	// worker's CPU per one-row transaction. Ending ctx ends the wait.
	stopRead := context.AfterFunc(ctx, func() { _ = s.conn.Conn().SetReadDeadline(time.Now()) })
	defer stopRead()
	for {
		if err := s.completeIfDone(ctx); err != nil {
			return err
		}
		if err := s.flushIfDue(ctx); err != nil {
			return err
		}
		if err := s.maybeIdle(ctx); err != nil {
			return err
		}
		if s.inflight == nil {
			if err := w.recordCatalog(ctx); err != nil {
				return err
			}
			if err := s.checkHeld(ctx); err != nil {
				return err
			}
		}
		if time.Since(s.lastStatus) > 10*time.Second {
			if err := s.sendStatus(ctx, s.ack, false); err != nil {
				return err
			}
		}
		wait := time.Second
		switch {
		case s.inflight != nil:
			wait = inflightPoll // no batch goes before it ends, which wakes the wait
		case len(s.batch) > 0:
			wait = max(time.Millisecond, w.cfg.BatchMaxDelay-time.Since(s.oldest))
			if w.cfg.BatchQuietGap > 0 {
				wait = min(wait, w.cfg.BatchQuietGap)
			}
		}
		if err := s.conn.Conn().SetReadDeadline(time.Now().Add(wait)); err != nil {
			return err
		}
		if s.inflightDone() {
			continue // done before the wait was set: its wake was overwritten
		}
		if err := ctx.Err(); err != nil {
			return err // ended before the deadline was set: the wait would not see it
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				continue
			}
			return fmt.Errorf("receive: %w", err)
		}
		if err := s.handle(ctx, msg); err != nil {
			return err
		}
	}
}

func (s *stream) handle(ctx context.Context, msg pgproto3.BackendMessage) error {
	switch m := msg.(type) {
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("replication: %s (SQLSTATE %s)", m.Message, m.Code)
	case *pgproto3.CopyData:
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
			if err != nil {
				return err
			}
			s.keepalive = time.Now()
			if s.idleTarget != 0 && ka.ServerWALEnd >= s.idleTarget {
				if err := s.idleAck(ctx); err != nil {
					return err
				}
			}
			if ka.ReplyRequested {
				return s.sendStatus(ctx, s.ack, false)
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(m.Data[1:])
			if err != nil {
				return err
			}
			s.lastData = time.Now()
			s.idleTarget = 0 // data arrived: this is no idle stream
			txn, err := s.asm.Feed(xld.WALData)
			if errors.Is(err, capture.ErrSpill) {
				return err // the worker's disk, not the transaction: the session retries
			}
			if err != nil {
				return s.decodeFailure(ctx, err)
			}
			if txn != nil {
				if sp := txn.Spill(); sp != nil {
					s.w.cfg.Log.Info("large transaction spilled to disk", "worker", s.w.cfg.WorkerID, "xid", txn.Xid,
						"commit_lsn", txn.CommitLSN.String(), "row_events", len(txn.Rows), "spilled_bytes", sp.Size())
					s.w.cfg.Metrics.ObserveSpill(sp.Size())
				}
				if len(s.batch) == 0 {
					s.oldest = time.Now()
				}
				s.batch = append(s.batch, txn)
				s.events += len(txn.Rows)
				if s.w.isBarrier(txn) {
					// Nothing after the barrier belongs to the stage: it is
					// materialized now, and the catch-up ends (complete).
					return s.flush(ctx, false, false)
				}
			}
		}
	}
	return nil
}
