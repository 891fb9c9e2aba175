package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/dberr"
)

// stream is one streaming session over the replication connection.
type stream struct {
	w    *Worker
	conn *pgconn.PgConn
	ack  pglogrepl.LSN // durable acknowledgement == slot position

	reg *registry
	// durable is the materialized high-watermark at session start: transactions
	// up to it are replays of durable ones (a stop before acknowledgement).
	durable pglogrepl.LSN
	asm     *capture.Assembler
	batch   []*capture.Txn
	events  int       // row events in batch
	oldest  time.Time // when the first transaction of the batch arrived

	// prepActive is the registry generation active after the last prepared
	// transaction (at session start: after the last materialized one); inflight is the batch being materialized while the next one
	// is received (nil when none).
	prepActive int64
	inflight   *inflight
	// mat is the session's one materialization connection, so that its cached
	// plans and scratch tables serve every batch.
	mat *pgxpool.Conn

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
}

// catchUp is a backlog being drained (batches materialized while the next is
// received), for the progress log.
type catchUp struct {
	since   time.Time // the backlog's first batch began
	txns    int       // transactions materialized since
	logged  time.Time // the last progress line (zero: none yet)
	logTxns int       // txns at the last progress line
}

func (s *stream) run(ctx context.Context) error {
	w := s.w
	var err error
	if s.reg, err = loadRegistry(ctx, w.pool); err != nil {
		return err
	}
	var durable string
	if err := w.pool.QueryRow(ctx, `SELECT registry_generation, coalesce(materialized_commit_lsn, generation_start_lsn)::text
		FROM synchro.progress`).Scan(&s.prepActive, &durable); err != nil {
		return err
	}
	if s.durable, err = pglogrepl.ParseLSN(durable); err != nil {
		return err
	}
	s.asm = capture.NewAssembler()
	s.asm.SpillAbove(w.cfg.SpillBytes, w.cfg.SpillDir)
	defer s.asm.Reset()
	defer func() { release(s.batch) }()
	if s.mat, err = w.pool.Acquire(ctx); err != nil {
		return err
	}
	defer s.mat.Release()
	// PostgreSQL runs a statement to its end after its client died unless told
	// to check: a backlog batch of a killed worker would hold the progress row,
	// and keep the worker that takes over waiting, until it finished. Timeouts
	// and a default isolation set for the database's sessions are meant for
	// applications: materialization waits for the locks it needs, takes as long
	// as a batch takes (a batch cancelled by statement_timeout would be received
	// and cancelled again), and reads each statement under a fresh snapshot
	// (synchro.await_visible waits for decoded transactions to become visible).
	if _, err := s.mat.Exec(ctx, `SELECT set_config('client_connection_check_interval', '1000', false),
		synchro.lift_timeouts(false), set_config('default_transaction_isolation', 'read committed', false)`); err != nil {
		return err
	}
	defer s.abandon()
	err = pglogrepl.StartReplication(ctx, s.conn, w.cfg.Slot, s.ack, pglogrepl.StartReplicationOptions{
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
		}
		if time.Since(s.lastStatus) > 10*time.Second {
			if err := s.sendStatus(ctx, s.ack, false); err != nil {
				return err
			}
		}
		wait := time.Second
		if len(s.batch) > 0 {
			wait = max(time.Millisecond, w.cfg.BatchMaxDelay-time.Since(s.oldest))
		}
		if s.inflight != nil {
			wait = min(wait, inflightPoll)
		}
		if err := s.conn.Conn().SetReadDeadline(time.Now().Add(wait)); err != nil {
			return err
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
			}
		}
	}
	return nil
}

// flushIfDue hands the buffered transactions to materialization when the batch
// is full or its oldest transaction has waited BatchMaxDelay. A full batch, or
// one received without a keepalive since its first transaction (the server had
// WAL to send all along), means a backlog: it is materialized while the next
// one is received, and the next one is flushed when it is full or this one is
// done. A batch due by time at a live rate is materialized before receiving
// goes on: that keeps the worker's share of the machine, and so the writers'
// commit latency and the capture latency, lower.
func (s *stream) flushIfDue(ctx context.Context) error {
	if len(s.batch) == 0 {
		return nil
	}
	cfg := s.w.cfg
	full := len(s.batch) >= cfg.BatchMaxTxns || s.events >= cfg.BatchMaxEvents
	if full || (s.inflight == nil && time.Since(s.oldest) >= cfg.BatchMaxDelay) {
		behind := full || s.keepalive.Before(s.oldest)
		return s.flush(ctx, behind)
	}
	return nil
}

// inflightPoll is how often the receive loop looks for the end of the batch
// being materialized while no WAL arrives.
const inflightPoll = 2 * time.Millisecond

// inflight is a batch whose materialization runs while the stream receives the
// next one. Everything else (hooks, acknowledgement, quarantine) stays on the
// stream's goroutine.
type inflight struct {
	txns      []*capture.Txn
	prepared  []batchTxn
	poison    *capture.Failure // a prepare failure of the transaction after the prepared ones
	poisonTxn *capture.Txn
	pipelined bool      // materialized while the stream receives the next batch
	started   time.Time // flush began
	prepped   time.Time // prepared
	done      chan matResult
}

type matResult struct {
	n        int // leading transactions durable
	failed   *matFailure
	err      error
	began    time.Time // materialization began (after the batch before it)
	finished time.Time
}

// flush prepares the buffered transactions, then, once the batch before them is
// materialized and acknowledged, starts materializing them in commit order, and
// unless pipelined waits for that too. A transaction that cannot be prepared or
// materialized is quarantined after every transaction before it was
// materialized and acknowledged.
func (s *stream) flush(ctx context.Context, pipelined bool) error {
	w := s.w
	b := &inflight{txns: s.batch, pipelined: pipelined, started: time.Now(), done: make(chan matResult, 1)}
	s.batch, s.events = nil, 0
	started := false // from then on complete or abandon releases the batch
	defer func() {
		if !started {
			release(b.txns) // the session ends before it started
		}
	}()
	if err := s.alive(ctx, func() error { return s.prepareBatch(ctx, b) }); err != nil {
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
	if b.poison == nil {
		if err := w.catalogDrift(ctx); err != nil {
			return err
		}
	}
	s.inflight, started = b, true
	go func() {
		began := time.Now()
		n, failed, err := s.materialize(ctx, b.prepared)
		b.done <- matResult{n: n, failed: failed, err: err, began: began, finished: time.Now()}
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

// prepareBatch prepares the transactions of b in commit order (pairing, row
// images); it stops at the first one that cannot be prepared, which becomes b's
// poison transaction.
func (s *stream) prepareBatch(ctx context.Context, b *inflight) error {
	w := s.w
	if err := w.step(StepPreparing); err != nil {
		return err
	}
	b.prepared = make([]batchTxn, 0, len(b.txns))
	images := batchImages(b.txns)
	for _, txn := range b.txns {
		if txn.CommitLSN <= s.durable {
			// A durable transaction replayed: its ledger row makes materialization
			// a no-op. It is not paired again, because the registry generation
			// active before it is no longer known (its own activations moved it).
			b.prepared = append(b.prepared, batchTxn{CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN,
				Xid: txn.Xid, CommitTime: txn.CommitTime, EventCount: len(txn.Rows), RegistryGeneration: s.prepActive})
			continue
		}
		if s.needsRegistry(txn) {
			// The registering transaction is decoded as soon as its commit is in
			// the WAL, a moment (with a synchronous standby, a round trip to it)
			// before its registration is visible to the worker's snapshot.
			if _, err := w.pool.Exec(ctx, `SELECT synchro.await_visible(ARRAY[$1::bigint])`, int64(txn.Xid)); err != nil {
				return err
			}
			reg, err := loadRegistry(ctx, w.pool)
			if err != nil {
				return err
			}
			s.reg = reg
		}
		bt, err := prepare(txn, s.reg, s.prepActive, images)
		if err != nil {
			if !errors.As(err, &b.poison) {
				return err
			}
			b.poisonTxn = txn
			break
		}
		s.prepActive = bt.RegistryGeneration
		b.prepared = append(b.prepared, bt)
	}
	return nil
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
		if err := s.acknowledge(ctx, b.prepared[r.n-1].EndLSN); err != nil {
			return err
		}
	}
	rows := 0
	for _, t := range b.prepared[:r.n] {
		rows += len(t.Events)
	}
	w.cfg.Metrics.ObserveBatch(r.n, rows, time.Since(b.started))
	w.cfg.Log.Debug("batch materialized", "worker", w.cfg.WorkerID, "transactions", r.n, "pipelined", b.pipelined,
		"prepare", b.prepped.Sub(b.started), "queued", r.began.Sub(b.prepped), "materialize", r.finished.Sub(r.began),
		"acknowledge", time.Since(ackAt))
	if r.n > 0 {
		if err := s.reportCatchUp(ctx, b, r.n); err != nil {
			return err
		}
	}
	if r.failed != nil {
		return s.quarantine(ctx, b.txns[r.n], r.failed.failure, r.failed.sqlstate)
	}
	if b.poison != nil {
		return s.quarantine(ctx, b.poisonTxn, b.poison, "")
	}
	return nil
}

// reportCatchUp logs a backlog's progress: every ProgressInterval while
// batches are materialized behind the WAL (pipelined), with the transactions
// materialized since the last line, their rate, the position reached and how
// far the server's WAL is ahead of it; and once, when a live batch follows a
// backlog that was reported, how long catching up took.
func (s *stream) reportCatchUp(ctx context.Context, b *inflight, n int) error {
	w, c, now := s.w, &s.catchUp, time.Now()
	if !b.pipelined {
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
	pos := b.prepared[n-1].EndLSN.String()
	var behind int64
	if err := w.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, pos).Scan(&behind); err != nil {
		return fmt.Errorf("read WAL position: %w", err)
	}
	done := c.txns - c.logTxns
	w.cfg.Log.Info("capture catching up", "worker", w.cfg.WorkerID, "transactions", done,
		"per_second", int(float64(done)/now.Sub(last).Seconds()), "position", pos, "behind_bytes", behind)
	c.logged, c.logTxns = now, c.txns
	return nil
}

func (s *stream) needsRegistry(txn *capture.Txn) bool {
	for _, a := range txn.Activations {
		if a.Generation > s.reg.latest {
			return true
		}
	}
	return false
}

// materialized failure of one transaction, with its SQLSTATE.
type matFailure struct {
	failure  *capture.Failure
	sqlstate string
}

// materialize runs one materialization call for the whole batch; when it fails
// it retries transaction by transaction so the earlier ones commit and exactly
// the failing one is reported, with the relation its failure is recorded
// against. It returns how many leading transactions are durable.
func (s *stream) materialize(ctx context.Context, txns []batchTxn) (int, *matFailure, error) {
	if len(txns) == 0 {
		return 0, nil, nil
	}
	err := s.materializeCall(ctx, txns, true)
	if err == nil {
		return len(txns), nil, nil
	}
	if !poisonable(err) {
		return 0, nil, err
	}
	for i := range txns {
		if err := s.materializeCall(ctx, txns[i:i+1], true); err != nil {
			if !poisonable(err) {
				return i, nil, err
			}
			code := dberr.SQLState(err)
			rel, err := s.failingRelation(ctx, txns[i], code)
			if err != nil {
				return i, nil, err
			}
			s.w.cfg.Log.Error("materialization failed", "worker", s.w.cfg.WorkerID, "commit_lsn", txns[i].CommitLSN.String(),
				"sqlstate", code, "relation_id", rel)
			f := &matFailure{failure: &capture.Failure{Class: capture.ClassMaterialize, Detail: "materialization failed",
				RelationID: rel}, sqlstate: code}
			return i, f, nil
		}
	}
	return len(txns), nil, nil
}

// failingRelation names the registered relation that txn's failed
// materialization (SQLSTATE sqlstate) is recorded against. The failure comes
// from set-based statements over all of the transaction's events, so it is
// found by attempts that are always rolled back: the transaction's relations,
// in the order it first changed them, are added one at a time, and the
// relation named is one whose events turn a passing attempt into one failing
// with the same SQLSTATE (binary search over those prefixes: a few attempts
// even for a transaction changing many relations). A transaction changing one
// relation names it after a single attempt without events; 0 (none) when the
// failure does not need any event.
func (s *stream) failingRelation(ctx context.Context, txn batchTxn, sqlstate string) (int64, error) {
	var order []int64
	rank := map[int64]int{} // a relation's place in order
	for _, e := range txn.Events {
		if _, ok := rank[e.RelationID]; !ok {
			rank[e.RelationID] = len(order)
			order = append(order, e.RelationID)
		}
	}
	// fails reports whether the events of the first k relations fail alone.
	fails := func(k int) (bool, error) {
		sub := txn
		sub.Events = nil
		for _, e := range txn.Events {
			if rank[e.RelationID] < k {
				sub.Events = append(sub.Events, e)
			}
		}
		sub.Applied = len(sub.Events)
		err := s.materializeCall(ctx, []batchTxn{sub}, false)
		switch {
		case err == nil:
			return false, nil
		case !poisonable(err):
			return false, err
		default:
			return dberr.SQLState(err) == sqlstate, nil
		}
	}
	if len(order) == 0 {
		return 0, nil
	}
	if f, err := fails(0); f || err != nil {
		return 0, err
	}
	lo, hi := 0, len(order) // the first lo relations pass, the first hi fail
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		f, err := fails(mid)
		if err != nil {
			return 0, err
		}
		if f {
			hi = mid
		} else {
			lo = mid
		}
	}
	return order[hi-1], nil
}

// materializeCall materializes txns in one database transaction: their events
// are copied into the session's scratch table, then one call materializes the
// batch, which commits whole or not at all (or, unless commit, is rolled back
// whatever happens: an attempt). No single value holds the events, so a source
// transaction of any size fits.
func (s *stream) materializeCall(ctx context.Context, txns []batchTxn, commit bool) error {
	body := batchJSON(txns)
	tx, err := s.mat.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit; after a failure the session's next statement reports the connection's state
	if _, err := tx.Exec(ctx, `SELECT synchro.materialize_scratch()`); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", "synchro_seg_event"}, eventColumns, &eventRows{txns: txns}); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT synchro.materialize_transaction($1::jsonb)`, body); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// poisonable tells a failure of the transaction itself (a permanent or poison
// error: it fails again) from a transient one, which only restarts the
// session: a retry of the same transaction may pass.
func poisonable(err error) bool { return dberr.Classify(err) != dberr.Transient }

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
			WHERE slot_name = $1 AND database = current_database()`, s.w.cfg.Slot, int32(s.conn.PID())).Scan(&confirmed, &held); err != nil {
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
	if err := s.w.untimed(ctx, nil, `SELECT synchro.record_acknowledgement($1::pg_lsn)`, boundary.String()); err != nil {
		return err
	}
	s.ack = boundary
	return s.w.step(StepAcknowledged)
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
	var flush string
	var readAt time.Time
	if err := s.w.pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text, clock_timestamp()`).Scan(&flush, &readAt); err != nil {
		return err
	}
	target, err := pglogrepl.ParseLSN(flush)
	if err != nil {
		return err
	}
	s.lastData = time.Now() // next idle attempt after another quiet interval
	if target <= s.ack {
		return nil
	}
	s.idleTarget, s.idleTargetAt = target, readAt
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
	if err := s.w.untimed(ctx, nil, `SELECT synchro.record_processed($1::pg_lsn, $2)`, target.String(), s.idleTargetAt); err != nil {
		if dberr.Classify(err) == dberr.Permanent {
			s.w.cfg.Log.Debug("idle acknowledgement withheld: a poison transaction is unresolved", "worker", s.w.cfg.WorkerID)
			return nil
		}
		return err
	}
	return s.acknowledge(ctx, target)
}

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
