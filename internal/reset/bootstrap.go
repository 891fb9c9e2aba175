package reset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synchro-sync/synchro/internal/db"
)

// Bootstrap runs the projection bootstrap in progress, or a new one of the
// relations waiting for one, through its phases: staging (the baseline of only
// its relations), catching up (their events only) to the barrier it writes
// once the stage is close behind the WAL, verification (ready), activation by
// the capture worker at the barrier, and retirement (what is left of the stage
// and its candidate slot). A bootstrap left in staging by a coordinator that
// died is started over (synchro.restart_bootstrap). Result.Phase is "" when no relation
// waits. It holds the coordinator lock throughout (ErrBusy: another runs).
func Bootstrap(ctx context.Context, cfg Config) (Result, error) {
	return coordinate(ctx, cfg, "bootstrap")
}

// barrierClose is how far (WAL bytes) the stage may trail the current WAL
// position when the barrier is written; barrierStall is how long the distance
// may stop shrinking before it is written anyway (a stage that stays a little
// behind a busy WAL).
const (
	barrierClose = 1 << 20
	barrierStall = 5 * time.Second
	barrierPoll  = 100 * time.Millisecond
)

func (c *coordinator) bootstrap(ctx context.Context) (Result, error) {
	q := db.New(c.pool)
	if err := c.retireActivated(ctx); err != nil {
		return Result{}, err
	}
	cur, err := q.CurrentReset(ctx)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		cur, err = c.beginBootstrap(ctx)
		if errors.Is(err, pgx.ErrNoRows) {
			return Result{}, nil // nothing waits
		}
	case err != nil:
		return Result{}, err
	case cur.Kind != "bootstrap":
		return Result{}, fmt.Errorf("stream reset %s is %s: pending bootstraps wait until it is activated or aborted",
			cur.ResetID.String(), cur.Phase)
	case cur.Phase == "staging":
		// Recorded by its registration (no slot yet), or left by a coordinator
		// that died before its baseline committed (a slot, maybe).
		found, err := q.SlotExists(ctx, cur.CandidateSlot)
		if err != nil {
			return Result{}, err
		}
		if found {
			c.cfg.Log.Warn("starting over a bootstrap left in staging (its baseline never committed)",
				"bootstrap", cur.ResetID.String(), "candidate_slot", cur.CandidateSlot)
			if err := q.RestartBootstrap(ctx, cur.ResetID); err != nil {
				return Result{}, fmt.Errorf("start bootstrap %s over: %w", cur.ResetID, err)
			}
			if cur, err = q.CurrentReset(ctx); err != nil {
				return Result{}, err
			}
		}
	default:
		c.cfg.Log.Info("resuming projection bootstrap", "bootstrap", cur.ResetID.String(), "phase", cur.Phase)
	}
	res := Result{ResetID: cur.ResetID.String(), Phase: cur.Phase}
	if err != nil {
		return res, err
	}
	if res.Phase == "staging" {
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
		c.cfg.Log.Info("bootstrap ready: capture activates it at its barrier", "bootstrap", res.ResetID)
		if err := c.point(PointReady); err != nil {
			return res, err
		}
	}
	if err := c.awaitActivation(ctx, cur.ResetID); err != nil {
		return res, err
	}
	res.Phase = "retired"
	return res, c.retireActivated(ctx)
}

// beginBootstrap records a bootstrap of the relations waiting for one
// (pgx.ErrNoRows: none waits).
func (c *coordinator) beginBootstrap(ctx context.Context) (db.CurrentResetRow, error) {
	q := db.New(c.pool)
	id, err := q.RecordBootstrap(ctx)
	if err != nil {
		return db.CurrentResetRow{}, fmt.Errorf("record bootstrap: %w", err)
	}
	if !id.Valid {
		return db.CurrentResetRow{}, pgx.ErrNoRows
	}
	return c.begun(ctx)
}

// begun logs and returns the reset or bootstrap just recorded.
func (c *coordinator) begun(ctx context.Context) (db.CurrentResetRow, error) {
	cur, err := db.New(c.pool).CurrentReset(ctx)
	if err != nil {
		return cur, err
	}
	noun := map[string]string{"reset": "stream reset", "bootstrap": "projection bootstrap"}[c.kind]
	c.cfg.Log.Info(noun+" begun", c.kind, cur.ResetID.String(), "candidate_slot", cur.CandidateSlot, "reason", c.cfg.Reason)
	return cur, c.point(PointBegun)
}

// barrierWhenClose writes the bootstrap's barrier once its stage is close
// behind the WAL (barrierClose), or has stopped gaining on it for
// barrierStall, and the capture stream exists: the capture worker waits at the
// barrier until the stage reached it, so the closer the stage, the shorter
// that wait. The channel reports the outcome once, when written or ctx ends.
func (c *coordinator) barrierWhenClose(ctx context.Context, id pgtype.UUID) <-chan error {
	done := make(chan error, 1)
	go func() {
		best, since := int64(-1), time.Now()
		t := time.NewTicker(barrierPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- ctx.Err()
				return
			case <-t.C:
			}
			p, err := db.New(c.pool).ResetProgress(ctx, id)
			if err != nil {
				continue // the catch-up reports what is wrong
			}
			if p.Phase != "catching_up" {
				done <- nil
				return
			}
			if best < 0 || p.DistanceBytes < best {
				best, since = p.DistanceBytes, time.Now()
			}
			if p.DistanceBytes > barrierClose && time.Since(since) < barrierStall {
				continue
			}
			if _, err := db.New(c.pool).GetMaterializedPosition(ctx, pgtype.UUID{}); err != nil {
				continue // no capture stream yet
			}
			done <- c.requestBarrier(ctx, id)
			return
		}
	}()
	return done
}

// awaitActivation waits until the capture worker activated the bootstrap at
// its barrier, logging every ProgressInterval while it waits.
func (c *coordinator) awaitActivation(ctx context.Context, id pgtype.UUID) error {
	started, logged := time.Now(), time.Now()
	for {
		phase, err := db.New(c.pool).BootstrapPhase(ctx, id)
		if err != nil {
			return err
		}
		switch phase {
		case "activated", "retired":
			c.cfg.Log.Info("bootstrap activated", "bootstrap", id.String(), "waited", time.Since(started).Round(time.Millisecond))
			return nil
		case "ready":
		default:
			return fmt.Errorf("bootstrap %s is %s, not activated", id.String(), phase)
		}
		if time.Since(logged) >= c.cfg.ProgressInterval {
			c.cfg.Log.Info("bootstrap waits for capture to reach its barrier", "bootstrap", id.String(),
				"waited", time.Since(started).Round(time.Second))
			logged = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(barrierPoll):
		}
	}
}

// retireActivated retires every activated bootstrap (a coordinator that died
// after the activation left its stage and slot).
func (c *coordinator) retireActivated(ctx context.Context) error {
	ids, err := db.New(c.pool).ActivatedBootstraps(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		removed, err := db.New(c.pool).RetireReset(ctx, id)
		if err != nil {
			return fmt.Errorf("retire bootstrap %s: %w", id.String(), err)
		}
		c.cfg.Log.Info("bootstrap retired", "bootstrap", id.String(), "removed", string(removed))
	}
	return nil
}

// RunBootstraps runs the projection bootstraps of the database until ctx
// ends: every interval it looks (over pool) for a relation waiting for its
// bootstrap or a bootstrap not yet retired, and runs Bootstrap when there is
// one. A failed run is logged and resumed at a later look; a coordinator
// running elsewhere (ErrBusy) is left to finish.
func RunBootstraps(ctx context.Context, pool db.DBTX, cfg Config, interval time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		work, err := db.New(pool).BootstrapWork(ctx)
		if err != nil || !work {
			continue
		}
		res, err := Bootstrap(ctx, cfg)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrBusy):
		case err != nil:
			cfg.Log.Error("projection bootstrap failed; it is resumed shortly", "bootstrap", res.ResetID, "phase", res.Phase,
				"error", err.Error())
		}
	}
}
