package reset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/wal"
)

// Point names a point between the coordinator's durable steps, where tests
// stop it as a crash would.
type Point string

const (
	PointBegun       Point = "begun"        // reset recorded in staging, no slot yet
	PointSlotCreated Point = "slot_created" // candidate slot created and recorded, baseline not begun
	PointStaging     Point = "staging"      // inside the baseline transaction, rows of a relation copied
	PointBaselined   Point = "baselined"    // baseline committed (catching_up), no barrier requested
	PointBarrier     Point = "barrier"      // barrier committed, catch-up not done
	PointCaughtUp    Point = "caught_up"    // barrier materialized in the stage, not verified
	PointReady       Point = "ready"        // verified, not activated
)

// Config configures a coordinator run.
type Config struct {
	DatabaseURL string
	Publication string // the capture publication ("": the one migration recorded)
	Reason      string
	Activate    bool // activate once ready

	ProgressInterval time.Duration // how often progress is logged (default 5 s)
	RetryInterval    time.Duration // pause before a new catch-up session after a failure

	// AfterPoint and AfterStep, when set, run after each of the coordinator's
	// points and the catch-up's steps; an error stops the run there at once.
	AfterPoint func(Point) error
	AfterStep  func(wal.Step) error

	Log *slog.Logger
}

// ErrStopped is returned when an AfterPoint hook stopped the run.
var ErrStopped = errors.New("reset coordinator stopped by hook")

// Result is where a run left the reset.
type Result struct {
	ResetID string
	Phase   string
}

type coordinator struct {
	cfg  Config
	pool *pgxpool.Pool
	kind string // "reset" or "bootstrap": what the coordinator runs (its log lines name it)
}

func (c *coordinator) point(p Point) error {
	if c.cfg.AfterPoint == nil {
		return nil
	}
	if err := c.cfg.AfterPoint(p); err != nil {
		return fmt.Errorf("%w at %s: %v", ErrStopped, p, err)
	}
	return nil
}

// Run runs the reset in progress (or a new one) through its phases: to ready,
// or with cfg.Activate to activated. It holds the coordinator lock throughout;
// a second coordinator is refused.
func Run(ctx context.Context, cfg Config) (Result, error) {
	return coordinate(ctx, cfg, "reset")
}

// coordinate runs fn of a coordinator of kind under the coordinator lock.
func coordinate(ctx context.Context, cfg Config, kind string) (Result, error) {
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 5 * time.Second
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Reason == "" {
		cfg.Reason = "operator reset"
	}
	pool, err := wal.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	lock, err := pool.Acquire(ctx)
	if err != nil {
		return Result{}, err
	}
	defer lock.Release()
	locked, err := db.New(lock).TryResetLock(ctx)
	if err != nil {
		return Result{}, err
	}
	if !locked {
		return Result{}, ErrBusy
	}
	defer db.New(lock).ResetUnlock(context.Background()) //nolint:errcheck
	if cfg.Publication == "" {
		if cfg.Publication, err = db.New(pool).GetCapturePublication(ctx); err != nil {
			return Result{}, err
		}
	}
	c := &coordinator{cfg: cfg, pool: pool, kind: kind}
	if kind == "bootstrap" {
		return c.bootstrap(ctx)
	}
	return c.run(ctx)
}

// ErrBusy is returned when another coordinator (of a reset or a bootstrap)
// runs on the database.
var ErrBusy = errors.New("another reset or bootstrap coordinator is running on this database")

func (c *coordinator) run(ctx context.Context) (Result, error) {
	q := db.New(c.pool)
	cur, err := q.CurrentReset(ctx)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		cur, err = c.begin(ctx)
	case err != nil:
		return Result{}, err
	case cur.Kind != "reset":
		return Result{}, fmt.Errorf("projection bootstrap %s is %s: a stream reset can begin once it is activated (synchrod runs it)",
			cur.ResetID.String(), cur.Phase)
	case cur.Phase == "staging":
		c.cfg.Log.Warn("discarding a reset left in staging (its baseline never committed); starting a new one",
			"reset", cur.ResetID.String(), "candidate_slot", cur.CandidateSlot)
		if err := q.AbortReset(ctx, cur.ResetID); err != nil {
			return Result{}, fmt.Errorf("discard reset %s: %w", cur.ResetID, err)
		}
		cur, err = c.begin(ctx)
	default:
		c.cfg.Log.Info("resuming stream reset", "reset", cur.ResetID.String(), "phase", cur.Phase)
	}
	res := Result{Phase: cur.Phase}
	if cur.ResetID.Valid {
		res.ResetID = cur.ResetID.String()
	}
	if err != nil {
		return res, err
	}
	if cur.Phase == "staging" {
		if err := c.stage(ctx, cur); err != nil {
			return res, err
		}
		res.Phase = "catching_up"
	}
	if res.Phase == "catching_up" {
		if err := c.catchUp(ctx, cur); err != nil {
			return res, err
		}
		if err := q.VerifyReset(ctx, cur.ResetID); err != nil {
			return res, fmt.Errorf("verify: %w", err)
		}
		res.Phase = "ready"
		c.cfg.Log.Info("stream reset ready", "reset", res.ResetID)
		if err := c.point(PointReady); err != nil {
			return res, err
		}
	}
	if c.cfg.Activate {
		if err := q.ActivateReset(ctx, cur.ResetID); err != nil {
			return res, fmt.Errorf("activate: %w", err)
		}
		res.Phase = "activated"
		c.cfg.Log.Info("stream reset activated", "reset", res.ResetID, "candidate_slot", cur.CandidateSlot)
	}
	return res, nil
}

// begin records a new reset; from its commit the active stream is held blocked.
func (c *coordinator) begin(ctx context.Context) (db.CurrentResetRow, error) {
	q := db.New(c.pool)
	if err := q.BeginReset(ctx, c.cfg.Reason); err != nil {
		return db.CurrentResetRow{}, fmt.Errorf("begin reset: %w", err)
	}
	return c.begun(ctx)
}

// catchUp requests the barrier (once) and consumes the candidate slot into the
// stage through it, logging progress.
func (c *coordinator) catchUp(ctx context.Context, cur db.CurrentResetRow) error {
	stage := &wal.Stage{ResetID: cur.ResetID.String(), Generation: cur.TargetGeneration, Slot: cur.CandidateSlot}
	var barrier <-chan error
	if c.kind == "bootstrap" {
		stage.Relations = cur.RelationIds
		barrier = c.barrierWhenClose(ctx, cur.ResetID)
	} else if err := c.requestBarrier(ctx, cur.ResetID); err != nil {
		return err
	}
	w := wal.New(wal.Config{
		DatabaseURL: c.cfg.DatabaseURL, Publication: c.cfg.Publication, WorkerID: c.kind + "-" + cur.ResetID.String()[:8],
		Stage: stage, ProgressInterval: c.cfg.ProgressInterval, RetryInterval: c.cfg.RetryInterval, AfterStep: c.cfg.AfterStep,
		Log: c.cfg.Log,
	}, c.pool)
	stop := c.reportCatchUp(ctx, cur.ResetID)
	err := w.CatchUp(ctx)
	stop()
	if barrier != nil {
		if berr := <-barrier; err == nil && berr != nil && !errors.Is(berr, context.Canceled) {
			err = berr
		}
	}
	if err != nil {
		return fmt.Errorf("staged catch-up: %w", err)
	}
	c.cfg.Log.Info(c.kind+" caught up to its barrier", c.kind, cur.ResetID.String())
	return c.point(PointCaughtUp)
}

// requestBarrier writes the barrier (once: a barrier already written is kept).
func (c *coordinator) requestBarrier(ctx context.Context, id pgtype.UUID) error {
	requested, err := db.New(c.pool).RequestBarrier(ctx, id)
	if err != nil {
		return fmt.Errorf("request barrier: %w", err)
	}
	if requested {
		c.cfg.Log.Info(c.kind+" barrier written", c.kind, id.String())
		return c.point(PointBarrier)
	}
	return nil
}

// reportCatchUp logs the catch-up's position, rate and distance to the barrier
// every ProgressInterval until the returned stop is called.
func (c *coordinator) reportCatchUp(ctx context.Context, id pgtype.UUID) (stop func()) {
	var lastTxns, lastDistance int64 = -1, -1
	last := time.Now()
	return every(ctx, c.cfg.ProgressInterval, func(ctx context.Context) {
		p, err := db.New(c.pool).ResetProgress(ctx, id)
		if err != nil {
			return
		}
		now := time.Now()
		attrs := []any{c.kind, id.String(), "position", p.StagedThrough, "distance_bytes", p.DistanceBytes,
			"transactions", p.TxnsCaughtUp}
		if lastTxns >= 0 {
			secs := now.Sub(last).Seconds()
			attrs = append(attrs, "per_second", int64(float64(p.TxnsCaughtUp-lastTxns)/secs))
			if gained := lastDistance - p.DistanceBytes; gained > 0 {
				attrs = append(attrs, "eta", (time.Duration(float64(p.DistanceBytes)/float64(gained)*secs) * time.Second).Round(time.Second))
			}
		}
		c.cfg.Log.Info(c.kind+" catching up", attrs...)
		lastTxns, lastDistance, last = p.TxnsCaughtUp, p.DistanceBytes, now
	})
}

// every runs fn every interval on a goroutine of its own until the returned
// stop is called (stop returns once fn has returned).
func every(ctx context.Context, interval time.Duration, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}
