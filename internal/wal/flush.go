package wal

import (
	"context"
	"fmt"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/db"
)

// flushIfDue hands the buffered transactions to materialization: a full batch
// at once (after the one in flight), any other once no batch is in flight and
// either the stream went quiet (no WAL for BatchQuietGap: an idle worker
// materializes a transaction as soon as it arrives, and batches grow only
// while a materialization runs or WAL keeps arriving) or its oldest
// transaction has waited BatchMaxDelay. A full batch, or one received without
// a keepalive since its first transaction (the server had WAL to send all
// along), means a backlog: it is materialized while the next one is received,
// and the next one is flushed when it is full or this one is done. A batch at
// a live rate is materialized before receiving goes on: that keeps the
// worker's share of the machine, and so the writers' commit latency and the
// capture latency, lower.
func (s *stream) flushIfDue(ctx context.Context) error {
	if len(s.batch) == 0 {
		return nil
	}
	cfg := s.w.cfg
	full := len(s.batch) >= cfg.BatchMaxTxns || s.events >= cfg.BatchMaxEvents
	quiet := cfg.BatchQuietGap > 0 && time.Since(s.lastData) >= cfg.BatchQuietGap
	if !full && (s.inflight != nil || !quiet && time.Since(s.oldest) < cfg.BatchMaxDelay) {
		return nil
	}
	behind := full || s.keepalive.Before(s.oldest)
	return s.flush(ctx, behind, behind)
}

// inflightPoll is how long the receive loop waits at most while a batch is
// materialized (its end wakes the loop sooner: wake).
const inflightPoll = 50 * time.Millisecond

// wake ends the receive loop's wait for WAL, so that it completes the batch
// that was in flight and flushes the next one at once. The loop looks at the
// batch in flight again after it set its wait (inflightDone), so a wake that
// comes before that is not lost.
func (s *stream) wake() {
	_ = s.conn.Conn().SetReadDeadline(time.Now())
}

// inflightDone reports whether the batch in flight has finished.
func (s *stream) inflightDone() bool {
	return s.inflight != nil && len(s.inflight.done) > 0
}

// inflight is a batch whose materialization runs while the stream receives the
// next one. Everything else (hooks, acknowledgement, quarantine) stays on the
// stream's goroutine.
type inflight struct {
	txns []*capture.Txn
	capture.Batch
	pipelined bool      // materialized while the stream receives the next batch
	behind    bool      // part of a backlog (catch-up progress)
	started   time.Time // flush began
	prepped   time.Time // prepared
	done      chan matResult
}

type matResult struct {
	n        int // leading transactions durable
	failed   *capture.MaterializeFailure
	err      error
	began    time.Time // materialization began (after the batch before it)
	finished time.Time
}

// flush prepares the buffered transactions (capture.Preparer), then, once the batch before them is
// materialized and acknowledged, starts materializing them in commit order, and
// unless pipelined waits for that too; a pipelined materialization ends the
// receive loop's wait when it is done (wake). A transaction that cannot be prepared or
// materialized is quarantined after every transaction before it was
// materialized and acknowledged.
func (s *stream) flush(ctx context.Context, pipelined, behind bool) error {
	w := s.w
	b := &inflight{txns: s.batch, pipelined: pipelined, behind: behind, started: time.Now(), done: make(chan matResult, 1)}
	s.batch, s.events = nil, 0
	started := false // from then on complete or abandon releases the batch
	defer func() {
		if !started {
			release(b.txns) // the session ends before it started
		}
	}()
	if err := s.alive(ctx, func() error {
		if err := w.step(StepPreparing); err != nil {
			return err
		}
		var err error
		b.Batch, err = s.prep.Prepare(ctx, b.txns)
		return err
	}); err != nil {
		return err
	}
	b.prepped = time.Now()

	if err := s.drain(ctx); err != nil {
		return err
	}
	if err := w.step(StepReceived); err != nil {
		return err
	}
	if err := s.checkSlot(ctx); err != nil {
		return err
	}
	if b.Poison == nil {
		if err := w.catalogDrift(ctx); err != nil {
			return err
		}
	}
	s.inflight, started = b, true
	go func() {
		began := time.Now()
		n, failed, err := s.mat.Materialize(ctx, b.Txns)
		b.done <- matResult{n: n, failed: failed, err: err, began: began, finished: time.Now()}
		if pipelined {
			s.wake()
		}
	}()
	if !pipelined {
		return s.drain(ctx)
	}
	return nil
}

// completeIfDone completes the batch in flight if its materialization ended.
func (s *stream) completeIfDone(ctx context.Context) error {
	if s.inflight == nil {
		return nil
	}
	select {
	case r := <-s.inflight.done:
		return s.complete(ctx, r)
	default:
		return nil
	}
}

// drain waits for the batch in flight and completes it.
func (s *stream) drain(ctx context.Context) error {
	if s.inflight == nil {
		return nil
	}
	var r matResult
	if err := s.alive(ctx, func() error { r = <-s.inflight.done; return nil }); err != nil {
		return err
	}
	return s.complete(ctx, r)
}

// abandon waits for the batch in flight without completing it: the session is
// ending, and what it made durable is acknowledged by the next one.
func (s *stream) abandon() {
	if s.inflight != nil {
		<-s.inflight.done
		release(s.inflight.txns)
		s.inflight = nil
	}
}

// release lets go of the spill files of transactions no longer needed.
func release(txns []*capture.Txn) {
	for _, t := range txns {
		t.Release()
	}
}

// complete acknowledges the durable prefix of the batch in flight and
// quarantines the transaction after it, if one failed.
func (s *stream) complete(ctx context.Context, r matResult) error {
	w, b := s.w, s.inflight
	s.inflight = nil
	defer release(b.txns)
	if r.err != nil {
		return r.err
	}
	ackAt := time.Now()
	if r.n > 0 {
		if err := w.step(StepMaterialized); err != nil {
			return err
		}
		if err := s.acknowledge(ctx, b.Txns[r.n-1].EndLSN); err != nil {
			return err
		}
	}
	rows := 0
	for _, t := range b.Txns[:r.n] {
		rows += len(t.Events)
	}
	w.cfg.Metrics.ObserveBatch(r.n, rows, time.Since(b.started))
	w.cfg.Log.Debug("batch materialized", "worker", w.cfg.WorkerID, "transactions", r.n, "pipelined", b.pipelined, "behind", b.behind,
		"prepare", b.prepped.Sub(b.started), "queued", r.began.Sub(b.prepped), "materialize", r.finished.Sub(r.began),
		"acknowledge", time.Since(ackAt))
	if r.n > 0 {
		if err := s.reportCatchUp(ctx, b, r.n); err != nil {
			return err
		}
	}
	for _, t := range b.txns[:r.n] {
		if w.isBarrier(t) {
			return errBarrier
		}
	}
	if r.failed != nil {
		txn := b.txns[r.n]
		w.cfg.Log.Error("materialization failed", "worker", w.cfg.WorkerID, "commit_lsn", txn.CommitLSN.String(),
			"sqlstate", r.failed.SQLState, "relation_id", r.failed.Failure.RelationID)
		return s.quarantine(ctx, txn, r.failed.Failure, r.failed.SQLState)
	}
	if b.Poison != nil {
		return s.quarantine(ctx, b.PoisonTxn, b.Poison, "")
	}
	return nil
}

// reportCatchUp logs a backlog's progress: every ProgressInterval while
// batches are materialized behind the WAL, with the transactions
// materialized since the last line, their rate, the position reached and how
// far the server's WAL is ahead of it; and once, when a live batch follows a
// backlog that was reported, how long catching up took.
func (s *stream) reportCatchUp(ctx context.Context, b *inflight, n int) error {
	w, c, now := s.w, &s.catchUp, time.Now()
	if !b.behind {
		if !c.logged.IsZero() {
			w.cfg.Log.Info("capture caught up", "worker", w.cfg.WorkerID, "transactions", c.txns+n,
				"duration", now.Sub(c.since).Round(time.Millisecond))
		}
		*c = catchUp{}
		return nil
	}
	if c.since.IsZero() {
		*c = catchUp{since: b.started}
	}
	c.txns += n
	last := c.logged
	if last.IsZero() {
		last = c.since
	}
	if now.Sub(last) < w.cfg.ProgressInterval {
		return nil
	}
	pos := b.Txns[n-1].EndLSN.String()
	behind, err := db.New(w.pool).WALBehind(ctx, pos)
	if err != nil {
		return fmt.Errorf("read WAL position: %w", err)
	}
	done := c.txns - c.logTxns
	w.cfg.Log.Info("capture catching up", "worker", w.cfg.WorkerID, "transactions", done,
		"per_second", int(float64(done)/now.Sub(last).Seconds()), "position", pos, "behind_bytes", behind)
	c.logged, c.logTxns = now, c.txns
	return nil
}

// catchUp is a backlog being drained (batches received behind the WAL), for
// the progress log.
type catchUp struct {
	since   time.Time // the backlog's first batch began
	txns    int       // transactions materialized since
	logged  time.Time // the last progress line (zero: none yet)
	logTxns int       // txns at the last progress line
}
