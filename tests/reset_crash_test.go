package tests

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/synchro-sync/synchro/internal/reset"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// TestStreamResetCoordinatorKilled kills the reset coordinator at each of its
// phase boundaries and inside staging and the staged catch-up (the hooks stop
// it as a crash would: its connections close, nothing after the point runs).
// The old stream stays as it was (the same generation, slot and position, and
// unready), and a second run ends in a correct activation: a stage whose
// baseline never committed is discarded with its slot and started again under
// a new candidate; a later one resumes from its own slot and boundary.
func TestStreamResetCoordinatorKilled(t *testing.T) {
	t.Parallel()
	points := []reset.Point{reset.PointBegun, reset.PointSlotCreated, reset.PointStaging, reset.PointBaselined,
		reset.PointBarrier, reset.PointCaughtUp, reset.PointReady}
	steps := []wal.Step{wal.StepReceived, wal.StepMaterialized, wal.StepSlotAdvanced}
	type crash struct {
		name  string
		point reset.Point
		step  wal.Step
	}
	var crashes []crash
	for _, p := range points {
		crashes = append(crashes, crash{name: "at_" + string(p), point: p})
	}
	for _, s := range steps {
		crashes = append(crashes, crash{name: "catch_up_" + string(s), step: s})
	}
	for _, c := range crashes {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newSyncEnv(t, "")
			recoverByReset(t, e, resetCauses[0], func() reset.Result {
				before := streamState(t, e.d)
				cfg := resetConfig(e.d, true)
				var fired atomic.Bool
				stop := errors.New("killed")
				if c.point != "" {
					cfg.AfterPoint = func(p reset.Point) error {
						if p == c.point && fired.CompareAndSwap(false, true) {
							return stop
						}
						return nil
					}
				} else {
					cfg.AfterStep = func(s wal.Step) error {
						if s == c.step && fired.CompareAndSwap(false, true) {
							return stop
						}
						return nil
					}
				}
				first, err := reset.Run(context.Background(), cfg)
				if !fired.Load() || err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("first run: %v (phase %s, hook fired %v), want it killed", err, first.Phase, fired.Load())
				}
				if got := streamState(t, e.d); got != before {
					t.Fatalf("the killed reset changed the active stream: %s, was %s", got, before)
				}
				if queryBool(t, e.d, `SELECT synchro.is_ready()`) {
					t.Fatal("ready while a reset is in progress")
				}
				res, err := reset.Run(context.Background(), resetConfig(e.d, true))
				if err != nil {
					t.Fatalf("second run: %v", err)
				}
				discarded := c.point == reset.PointBegun || c.point == reset.PointSlotCreated || c.point == reset.PointStaging
				if got := res.ResetID != first.ResetID; got != discarded {
					t.Fatalf("second run reset %s after %s: a new reset %v, want %v", res.ResetID, first.ResetID, got, discarded)
				}
				if discarded {
					if got := queryText(t, e.d, `SELECT phase || ' ' || NOT EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = r.candidate_slot)
						FROM synchro.stream_reset r WHERE reset_id = $1`, first.ResetID); got != "aborted true" {
						t.Fatalf("the discarded reset is %q, want aborted with its slot dropped", got)
					}
					if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.projection j JOIN synchro.stream_reset r ON r.target_generation = j.stream_generation
						WHERE r.reset_id = $1`, first.ResetID); n != 0 {
						t.Fatalf("%d staged projections of the discarded reset remain", n)
					}
				}
				return res
			})
		})
	}
}

// streamState is the active stream's generation, slot and materialized
// position.
func streamState(t *testing.T, d *testdb.DB) string {
	t.Helper()
	return queryText(t, d, `SELECT stream_generation || ' ' || slot_name || ' ' || coalesce(materialized_commit_lsn::text, '-')
		FROM synchro.progress`)
}

// TestStreamResetPostgresRestart restarts PostgreSQL (an immediate stop) during
// the staged catch-up, and right after the activation: the catch-up resumes
// from its durable acknowledgement of the same candidate slot, the reset
// activates correctly, and the worker streams the new slot after the second
// restart too.
func TestStreamResetPostgresRestart(t *testing.T) {
	t.Parallel()
	url, data, port := ownClusterAt(t)
	e := newSyncEnvOn(t, testdb.NewAt(t, url), "")
	recoverByReset(t, e, resetCauses[0], func() reset.Result {
		cfg := resetConfig(e.d, true)
		var restarted atomic.Bool
		cfg.AfterStep = func(s wal.Step) error {
			if s == wal.StepMaterialized && restarted.CompareAndSwap(false, true) {
				restartCluster(t, data, port)
			}
			return nil
		}
		res, err := reset.Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("reset: %v", err)
		}
		if !restarted.Load() {
			t.Fatal("PostgreSQL was not restarted during the catch-up")
		}
		// And again right after the activation, before any checkpoint: the
		// candidate slot's confirmed position may go back to where the last
		// checkpoint saved it, which is never before the generation's start.
		restartCluster(t, data, port)
		return res
	})
}

// TestStreamResetPushGate: a push accepted while a reset runs clears its
// client's capture gate only through activated coverage (accepted before the
// candidate's snapshot: covered by the baseline) or WAL materialization (after
// it: materialized by the staged catch-up); before activation both clients'
// pulls are refused capture_pending (the gate runs before readiness is asked,
// in synchro.pull), after it both are served.
func TestStreamResetPushGate(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	dropResetSlots(t, e)
	e.connect(t, "u1", "covered")
	e.connect(t, "u1", "staged")
	resetCauses[0].block(t, e)
	resetCauses[0].repair(t, e)
	cfg := resetConfig(e.d, false)
	cfg.AfterPoint = func(p reset.Point) error {
		switch p {
		case reset.PointBegun: // before the candidate slot and its snapshot
			e.push(t, "u1", "covered", mut("m1", "docs", "insert", map[string]any{"id": "covered"}, map[string]any{"owner_id": "u1"}))
		case reset.PointBaselined: // after the baseline, before the barrier
			e.push(t, "u1", "staged", mut("m1", "docs", "insert", map[string]any{"id": "staged"}, map[string]any{"owner_id": "u1"}))
		}
		return nil
	}
	res, err := reset.Run(context.Background(), cfg)
	if err != nil || res.Phase != "ready" {
		t.Fatalf("reset: %v (%s), want ready", err, res.Phase)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.reset_coverage c JOIN synchro.fence f USING (fence_id)
		WHERE c.reset_id = $1 AND f.client_id = 'covered'`, res.ResetID); n != 1 {
		t.Fatalf("the first push has %d coverage records, want 1", n)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.event_ledger l JOIN synchro.fence f USING (fence_id)
		JOIN synchro.stream_reset r ON r.target_generation = l.stream_generation WHERE r.reset_id = $1 AND f.client_id = 'staged'`, res.ResetID); n != 1 {
		t.Fatalf("the second push was materialized %d times in the stage, want once", n)
	}
	requireGated(t, e, "u1", "covered", "ready, not activated")
	requireGated(t, e, "u1", "staged", "ready, not activated")
	e.d.Exec(t, `SELECT synchro.activate_reset($1)`, res.ResetID)
	for _, c := range []string{"covered", "staged"} {
		if err := sqlPull(e, "u1", c); err != nil {
			t.Fatalf("after activation: pull of client %s: %v", c, err)
		}
	}
	waitCaptureReady(t, e.d)
	r := newReplica()
	e.rebuildScope(t, "u1", "covered", "user:u1", 100, r)
	requireScopeEqualsDocs(t, e, r, "u1")
}
