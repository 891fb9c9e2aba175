package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/metrics"
)

// Step names a point between the worker's durable steps, where tests stop it.
type Step string

const (
	StepPreparing    Step = "preparing"     // a batch is being prepared; the stream does not read meanwhile
	StepReceived     Step = "received"      // a batch is buffered, nothing of it durable yet
	StepMaterialized Step = "materialized"  // materialization committed, slot not advanced
	StepSlotAdvanced Step = "slot_advanced" // slot advanced, acknowledgement not recorded
	StepAcknowledged Step = "acknowledged"  // acknowledgement recorded
)

// Config configures a worker.
type Config struct {
	DatabaseURL string
	Slot        string
	Publication string
	WorkerID    string

	BatchMaxTxns   int           // most transactions per materialization call
	BatchMaxEvents int           // most row events per materialization call (a batch may exceed it by one transaction)
	BatchMaxDelay  time.Duration // longest a received transaction waits for its batch
	// BatchQuietGap: a batch goes (when none is in flight) once the stream has
	// sent no WAL for this long, before BatchMaxDelay; 0 is
	// DefaultBatchQuietGap, a negative gap waits BatchMaxDelay always.
	BatchQuietGap time.Duration
	// SpillBytes is how much row data of one source transaction the worker
	// holds in memory; the values and images of its later row events wait in a
	// temporary file in SpillDir ("": the system's temporary directory) until
	// the transaction's batch is done.
	SpillBytes        int64
	SpillDir          string
	IdleAckInterval   time.Duration // how often an idle stream acknowledges the flush position
	HeartbeatInterval time.Duration
	RetryInterval     time.Duration // pause before a new session after a failure or while blocked
	ProgressInterval  time.Duration // how often a worker draining a backlog logs its progress

	// HistoryRetention is how long the event ledger and write fences of an
	// acknowledged transaction are kept (synchro.prune_capture_history); zero
	// keeps them for good. PruneInterval is how often the worker prunes.
	// The worker also retires clients and prunes push outcomes then, by the
	// client retention stored in the database (synchro.prune_clients).
	HistoryRetention time.Duration
	PruneInterval    time.Duration
	// PullHistoryRetention is how long the pull history (effects, superseded
	// row versions, closed membership edges, superseded scope digests) is kept
	// behind the materialized position (synchro.prune_history moves the
	// retention horizon); zero keeps it for good.
	PullHistoryRetention time.Duration

	// Metrics, when set, records every materialized batch.
	Metrics *metrics.Metrics

	// Stage, when set, makes the worker a stream reset's staged catch-up
	// (CatchUp) instead of the capture worker (Run).
	Stage *Stage

	// AfterStep, when set, runs after each step; an error stops the worker there
	// at once, as a crash would (tests use it).
	AfterStep func(Step) error

	Log *slog.Logger
}

// DefaultBatchMaxDelay is how long a received transaction waits at most for its
// batch while WAL keeps arriving. Measured at 2,000 offered one-row
// transactions/s on two cores, 10 ms against 20 ms: commit-to-materialized p50
// about 20 ms lower, p99 lower in three of four interleaved runs, and the
// writers' latency no higher (docs/decisions.md, "Capture throughput").
const DefaultBatchMaxDelay = 10 * time.Millisecond

// DefaultBatchQuietGap is how long the stream must stay quiet (no WAL) for a
// batch to go before BatchMaxDelay: on an idle stream a transaction is
// materialized about this long after it arrives (docs/decisions.md, "Adaptive
// batching").
const DefaultBatchQuietGap = time.Millisecond

// DefaultSpillBytes is the row data of one source transaction the worker holds
// in memory before it spills the rest to a temporary file.
const DefaultSpillBytes = 64 << 20

func (c *Config) defaults() {
	if c.BatchMaxTxns <= 0 {
		c.BatchMaxTxns = 2000
	}
	if c.BatchMaxEvents <= 0 {
		c.BatchMaxEvents = 10000
	}
	if c.BatchMaxDelay <= 0 {
		c.BatchMaxDelay = DefaultBatchMaxDelay
	}
	if c.BatchQuietGap == 0 {
		c.BatchQuietGap = DefaultBatchQuietGap
	}
	if c.SpillBytes <= 0 {
		c.SpillBytes = DefaultSpillBytes
	}
	if c.IdleAckInterval <= 0 {
		c.IdleAckInterval = time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 10 * time.Second
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.PruneInterval <= 0 {
		c.PruneInterval = time.Minute
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// minPoolConns is the least pool size a worker runs with: a session holds one
// connection for the worker role lock and one for materialization; heartbeats
// and pruning take one briefly.
const minPoolConns = 3

// PoolConns is the size of the pool NewPool gives a worker: the session's two,
// and room for the heartbeat, pruning, acknowledgements and catalog checks at once.
const PoolConns = 8

// LiftTimeouts sets, in the connection settings params, the application
// timeouts a worker connection (or a reset's baseline connection) runs
// without: statement_timeout, lock_timeout and idle_in_transaction_session_timeout.
func LiftTimeouts(params map[string]string) {
	for _, k := range []string{"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"} {
		params[k] = "0"
	}
}

// NewPool returns a pool of the worker's own on databaseURL, of PoolConns
// connections unless the URL sets pool_max_conns. Sharing a pool with the
// process's other statements let a metrics scrape or a readiness query take the
// connections the worker waits for, and the worker the ones they need.
//
// Its connections turn off statement_timeout, lock_timeout and
// idle_in_transaction_session_timeout (settings sent at connection start win
// over the database's and the role's, and over the URL's): a worker statement
// that timed out only made the session retry it. transaction_timeout
// (PostgreSQL 17) is not sent, since an older server refuses a connection naming
// it; materialization and the worker's records lift it with synchro.lift_timeouts.
func NewPool(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	LiftTimeouts(cfg.ConnConfig.RuntimeParams)
	// pgxpool takes pool_max_conns out of the settings it parsed; the plain
	// connection settings still name it when the URL gives it.
	given, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	if _, ok := given.RuntimeParams["pool_max_conns"]; !ok {
		cfg.MaxConns = PoolConns
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// ErrStopped is returned by Run when an AfterStep hook stopped the worker.
var ErrStopped = errors.New("worker stopped by hook")

// errBlocked ends a session while something only an operator can repair blocks
// the stream: a poison transaction, relation drift, another publication, or a
// slot that is missing, replaced or invalidated. Its text prefixes the reason.
var errBlocked = errors.New("stream blocked")

// errPoison is errBlocked by an unresolved poison transaction.
var errPoison = fmt.Errorf("%w by a poison transaction", errBlocked)

// errStandby ends a session while another worker holds the worker role.
var errStandby = errors.New("another worker holds the worker role")

// Worker is one capture worker process.
type Worker struct {
	cfg     Config
	pool    *pgxpool.Pool
	started time.Time

	mu    sync.Mutex
	state string
	slot  string     // the slot the current session streams (the active one, or the stage's)
	hbMu  sync.Mutex // serializes heartbeat writes

	// When harmless catalog changes were last recorded (recordCatalog; the
	// session's goroutine only).
	recorded time.Time
}

// New returns a worker over pool (a pool on cfg.DatabaseURL).
func New(cfg Config, pool *pgxpool.Pool) *Worker {
	cfg.defaults()
	w := &Worker{cfg: cfg, pool: pool, started: time.Now(), state: "starting", slot: cfg.Slot}
	if cfg.Stage != nil {
		w.slot = cfg.Stage.Slot
	}
	return w
}

func (w *Worker) setSlot(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.slot = s
}

func (w *Worker) getSlot() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.slot
}

// staged is the target generation of the stage the worker catches up (NULL
// for the capture worker).
func (w *Worker) staged() pgtype.UUID {
	if w.cfg.Stage == nil {
		return pgtype.UUID{}
	}
	return w.cfg.Stage.Generation
}

func (w *Worker) setState(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != s {
		w.cfg.Log.Info("worker state", "worker", w.cfg.WorkerID, "state", s)
	}
	w.state = s
}

func (w *Worker) getState() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Run streams until ctx ends (nil, after recording the state stopped) or a hook
// stops the worker (ErrStopped); it refuses at once a pool too small to run a
// session. Failures end the session; a new one starts after RetryInterval.
func (w *Worker) Run(ctx context.Context) (err error) {
	if n := w.pool.Config().MaxConns; n < minPoolConns {
		return fmt.Errorf("the worker's pool allows %d connections; it needs at least %d (worker role lock, materialization, progress and heartbeat)", n, minPoolConns)
	}
	defer func() {
		if err == nil {
			w.recordStopped()
		}
	}()
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go w.heartbeat(hbCtx)
	go w.pruneHistory(hbCtx)
	lastBlock := ""
	for {
		err := w.session(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrStopped):
			return err
		case errors.Is(err, errBlocked):
			if w.getState() != "blocked" || err.Error() != lastBlock {
				w.cfg.Log.Error("capture blocked", "worker", w.cfg.WorkerID, "reason", err.Error())
			}
			lastBlock = err.Error()
			w.setState("blocked")
		case errors.Is(err, errStandby):
			w.setState("standby")
		case err != nil:
			w.setState("retrying")
			w.cfg.Log.Error("worker session failed", "worker", w.cfg.WorkerID, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.cfg.RetryInterval):
		}
	}
}

func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if err := w.recordHeartbeat(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Log.Warn("heartbeat failed", "worker", w.cfg.WorkerID, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recordStopped records the state stopped in the heartbeat row of a worker whose
// context ended, so that readiness and synchroctl status tell at once that it no
// longer streams rather than once its last heartbeat is older than the limit. A
// worker that dies leaves its last state, which the heartbeat's age then shows
// stale.
func (w *Worker) recordStopped() {
	w.setState("stopped")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.recordHeartbeat(ctx); err != nil {
		w.cfg.Log.Warn("could not record the stopped state", "worker", w.cfg.WorkerID, "error", err.Error())
	}
}

// recordHeartbeat writes the heartbeat row with the current state. Writes are
// serialized and each reads the state under the same lock, so a write that
// returns has superseded every heartbeat read before it.
func (w *Worker) recordHeartbeat(ctx context.Context) error {
	w.hbMu.Lock()
	defer w.hbMu.Unlock()
	return db.New(w.pool).RecordHeartbeat(ctx, db.RecordHeartbeatParams{WorkerID: w.cfg.WorkerID, State: w.getState(),
		StartedAt: pgtype.Timestamptz{Time: w.started, Valid: true}, SlotName: w.getSlot()})
}

// untimed runs one statement on a pool connection after
// synchro.lift_timeouts(true), both in one round trip and one implicit
// transaction: the statement, lock, idle-in-transaction and transaction
// timeouts set for the database's application sessions do not bind it (the
// extended protocol arms statement_timeout for each statement when it starts,
// after the call). scan, when set, reads the statement's one row.
func (w *Worker) untimed(ctx context.Context, scan func(pgx.Row) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(`SELECT synchro.lift_timeouts(true)`)
	q := b.Queue(sql, args...)
	if scan != nil {
		q.QueryRow(scan)
	}
	return w.pool.SendBatch(ctx, b).Close()
}

func (w *Worker) step(s Step) error {
	if w.cfg.AfterStep == nil {
		return nil
	}
	if err := w.cfg.AfterStep(s); err != nil {
		return fmt.Errorf("%w at %s: %v", ErrStopped, s, err)
	}
	return nil
}

// session holds the worker role (a session advisory lock), prepares the stream
// and the slot, then streams until an error. A stage's session (CatchUp) runs
// under its coordinator's reset lock instead, streams the candidate slot into
// the stage, and is held neither by a reset nor by the active stream's poison
// records; drift holds both.
func (w *Worker) session(ctx context.Context) error {
	if w.cfg.Stage == nil {
		release, err := w.takeRole(ctx)
		if err != nil {
			return err
		}
		defer release()
	}
	if err := w.checkPublication(ctx); err != nil {
		return err
	}
	repl, err := w.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background())

	if w.cfg.Stage == nil {
		if err := w.ensureStream(ctx, repl); err != nil {
			return err
		}
		if err := w.resetHolds(ctx); err != nil {
			return err
		}
	}
	ack, err := w.reconcileSlot(ctx)
	if err != nil {
		return err
	}
	// Also while a poison transaction blocks the stream: a blocked session
	// ends here, and the next one starts after RetryInterval.
	if err := w.recordCatalog(ctx); err != nil {
		return err
	}
	if w.cfg.Stage == nil {
		if blocked, err := w.poisonBlocks(ctx); err != nil {
			return err
		} else if blocked {
			return errPoison
		}
	}
	if err := w.catalogDrift(ctx); err != nil {
		return err
	}
	// The stream's first look for a reset holding it is due a second after
	// this session's (resetHolds).
	s := &stream{w: w, conn: repl, ack: ack, heldChecked: time.Now()}
	return s.run(ctx)
}

// takeRole takes the worker role (errStandby while another worker holds it);
// release lets go of it.
func (w *Worker) takeRole(ctx context.Context) (release func(), err error) {
	lockConn, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	locked, err := db.New(lockConn).TryWorkerLock(ctx)
	if err != nil || !locked {
		lockConn.Release()
		if err == nil {
			err = errStandby
		}
		return nil, err
	}
	if prev := w.getState(); prev != "blocked" && prev != "retrying" {
		w.cfg.Log.Info("worker role acquired", "worker", w.cfg.WorkerID, "previous_state", prev)
	}
	return func() {
		db.New(lockConn).WorkerUnlock(context.Background()) //nolint:errcheck
		lockConn.Release()
	}, nil
}

func (w *Worker) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	return ReplicationConn(ctx, w.cfg.DatabaseURL, "synchro-worker")
}

// OutputSettings are the settings under which PostgreSQL's output functions
// render values as capture's image conversion expects (package wire): the
// walsender's, and those of any session whose text values are rendered the
// same way (a stream reset's baseline).
var OutputSettings = map[string]string{
	"DateStyle": "ISO, YMD", "TimeZone": "UTC", "extra_float_digits": "3", "bytea_output": "hex",
	"IntervalStyle": "iso_8601",
}

// ReplicationConn opens a logical replication connection to databaseURL in
// OutputSettings.
func ReplicationConn(ctx context.Context, databaseURL, application string) (*pgconn.PgConn, error) {
	// Parsed as a pool's URL: pgx's own settings in it (pool_max_conns, say)
	// are not the server's, which refuses a connection naming them.
	pcfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	cfg := &pcfg.ConnConfig.Config
	for k, v := range OutputSettings {
		cfg.RuntimeParams[k] = v
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = application
	return pgconn.ConnectConfig(ctx, cfg)
}

// checkPublication blocks capture (errBlocked) while the worker's publication is
// not the capture publication that migration recorded (synchroctl migrate
// --publication): registration adds relations to that one and readiness checks
// it, so a worker streaming another would never decode the rows of a relation
// registered later.
func (w *Worker) checkPublication(ctx context.Context) error {
	recorded, err := db.New(w.pool).GetCapturePublication(ctx)
	if err != nil {
		return err
	}
	if recorded != w.cfg.Publication {
		return fmt.Errorf("%w: the worker streams publication %q, but the capture publication is %q; run synchrod and synchroctl migrate with the same --publication",
			errBlocked, w.cfg.Publication, recorded)
	}
	return nil
}

// poisonBlocks reports whether a poison transaction blocks the stream: it does
// until an operator requests its retry.
func (w *Worker) poisonBlocks(ctx context.Context) (bool, error) {
	return db.New(w.pool).PoisonBlocks(ctx)
}

// catalogDrift blocks capture (errBlocked) while a registered relation has drift
// that no decoded transaction can show (synchro.catalog_drift): it was dropped,
// perhaps recreated under its name (writes to the new table have no fence
// triggers and no publication membership, so they never reach the stream), a
// registered column was dropped and added again, a recorded partition was
// detached, dropped or made unlogged, a partition's replica identity changed,
// and the other kinds synchro.catalog_drift lists (docs/change-stream.md, "Registry
// activation and relation drift"). Drift
// that decoded row events show blocks the stream at the first of them. Each
// check records the harmless catalog changes when due (recordCatalog), also
// while drift blocks capture: recording never hides drift.
func (w *Worker) catalogDrift(ctx context.Context) error {
	if err := w.recordCatalog(ctx); err != nil {
		return err
	}
	var id int64
	var name, problem string
	err := w.pool.QueryRow(ctx, `SELECT relation_id, relation, problem FROM synchro.catalog_drift() LIMIT 1`).Scan(&id, &name, &problem)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	w.cfg.Log.Error("registered relation drifted: relation drift blocks capture", "worker", w.cfg.WorkerID,
		"relation_id", id, "relation", name, "problem", problem)
	return fmt.Errorf("%w: registered relation %d (%s) %s", errBlocked, id, name, problem)
}

// catalogRecordInterval bounds how often the worker records harmless catalog
// changes: every batch's catalog check would otherwise add two statements.
const catalogRecordInterval = time.Second

// recordCatalog records, at most once per catalogRecordInterval, the harmless
// catalog changes since the last time: new storage alone, a registered
// column's definition alone (synchro.record_storage; both together are drift,
// which it never records), and the labels of enum values added
// (synchro.record_enum_labels, so that renaming one later is drift too). Both
// are safe at any moment, also while drift or a poison transaction blocks
// capture (a harmless change of each kind during a block would otherwise read
// as a rewrite once the block is repaired); the stream calls it between
// messages too, so that a change is recorded within about a second even when
// nothing follows it. It waits for registry rows another session holds
// (untimed) rather than failing the session.
func (w *Worker) recordCatalog(ctx context.Context) error {
	if time.Since(w.recorded) < catalogRecordInterval {
		return nil
	}
	if err := w.untimed(ctx, nil, `SELECT synchro.record_storage(), synchro.record_enum_labels()`); err != nil {
		return err
	}
	w.recorded = time.Now()
	return nil
}
