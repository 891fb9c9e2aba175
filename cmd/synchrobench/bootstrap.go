package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/synchro-sync/synchro/internal/reset"
)

// bootstrapRows is how many rows the bootstrapped table holds.
const bootstrapRows = 1_000_000

// bootstrapRun registers bench.notes holding bootstrapRows rows (a column rule
// with an excluded column) while the capture worker runs and a writer commits
// 200 one-row transactions a second (every other one an UPDATE of a
// bench.notes row), then runs its projection bootstrap (reset.Bootstrap,
// configured as synchrod's) to activation by the capture worker. It reports
// the rows bootstrapped a second from the registration's commit to the
// activation's, beside a bare COPY of the same rows in the same run, and the
// split: staging (the Go copy of the projections, then the SQL of versions,
// coverage and the commit), the catch-up to the barrier, the verification,
// the capture worker's wait at the barrier and the activation
// (synchro.activate_bootstrap in the worker's transaction).
func bootstrapRun(ctx context.Context, adminURL string) ([]row, error) {
	url, pool, drop, err := benchDB(ctx, adminURL, "bench_bootstrap")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := pool.Exec(ctx, notesTable); err != nil {
		return nil, err
	}
	rels := []resetRelation{notesRelation(bootstrapRows)}
	if _, err := loadRelations(ctx, pool, rels); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return nil, err
	}
	copied, copyRate, err := bareCopy(ctx, url, rels)
	if err != nil {
		return nil, err
	}
	progress("bootstrap: bare COPY of %d rows at %.0f rows/s; registering with a writer at %d tx/s", copied, copyRate, resetWriterRate)

	stop := startWorker(url, pool)
	defer stop()
	if err := waitFor(ctx, pool, `SELECT EXISTS (SELECT FROM synchro.progress)`); err != nil {
		return nil, err
	}
	w := startBenchWriter(ctx, pool, bootstrapRows)
	defer w.stop()          //nolint:errcheck // a no-op once stopped
	time.Sleep(time.Second) // the writer writes before the registration too
	if _, err := pool.Exec(ctx, registerNotes); err != nil {
		return nil, err
	}
	registered := time.Now()
	var id string
	if err := pool.QueryRow(ctx, `SELECT reset_id::text FROM synchro.stream_reset WHERE kind = 'bootstrap' AND phase = 'staging'`).Scan(&id); err != nil {
		return nil, fmt.Errorf("the registration recorded no bootstrap: %w", err)
	}

	// The activation commits in the capture worker's transaction: its commit
	// is seen by polling, its start is activated_at (the transaction's now()).
	activated := make(chan time.Time, 1)
	pollCtx, cancelPoll := context.WithCancel(ctx)
	defer cancelPoll()
	go func() {
		for pollCtx.Err() == nil {
			var done bool
			if err := pool.QueryRow(pollCtx, `SELECT phase IN ('activated', 'retired') FROM synchro.stream_reset WHERE reset_id = $1`,
				id).Scan(&done); err == nil && done {
				activated <- time.Now()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	pts := &pointTimes{at: map[reset.Point]time.Time{}}
	res, err := reset.Bootstrap(ctx, reset.Config{DatabaseURL: url, Reason: "registration of a populated relation",
		Log: coordinatorLog(), AfterPoint: pts.record})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if res.Phase != "retired" || res.ResetID != id {
		return nil, fmt.Errorf("bootstrap %s ended %s, want %s retired", res.ResetID, res.Phase, id)
	}
	var activatedAt time.Time
	select {
	case activatedAt = <-activated:
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("bootstrap %s retired, its activation never seen", id)
	}
	written, werr := w.stop()
	if werr != nil {
		return nil, fmt.Errorf("writer: %w", werr)
	}
	total := activatedAt.Sub(registered)

	var staged, caughtUp int64
	var txStart time.Time
	var verification []byte
	if err := pool.QueryRow(ctx, `SELECT rows_staged, txns_caught_up, activated_at, verification FROM synchro.stream_reset WHERE reset_id = $1`,
		id).Scan(&staged, &caughtUp, &txStart, &verification); err != nil {
		return nil, err
	}
	var v struct {
		Rows        int64 `json:"rows"`
		NewVersions int64 `json:"new_versions"`
		Memberships int64 `json:"memberships_opened"`
	}
	if err := json.Unmarshal(verification, &v); err != nil {
		return nil, err
	}
	if staged != bootstrapRows || v.Rows != bootstrapRows || v.Memberships != bootstrapRows {
		return nil, fmt.Errorf("the bootstrap staged %d rows and activated %d with %d memberships, want %d each",
			staged, v.Rows, v.Memberships, bootstrapRows)
	}
	if err := pts.check("the bootstrap", len(rels)); err != nil {
		return nil, err
	}
	floor, err := stagingFloor(ctx, pool, staged)
	if err != nil {
		return nil, err
	}
	at := pts.at
	stagingDur, copyDur, sqlDur := pts.staging()
	catchUpDur := at[reset.PointCaughtUp].Sub(at[reset.PointBaselined])
	verifyDur := at[reset.PointReady].Sub(at[reset.PointCaughtUp])
	// The worker's transaction may have begun before the coordinator saw the
	// bootstrap ready: then the activation is timed from ready.
	waitDur := max(txStart.Sub(at[reset.PointReady]), 0)
	activateDur := activatedAt.Sub(at[reset.PointReady].Add(waitDur))
	before := at[reset.PointSlotCreated].Sub(registered)
	progress("bootstrap: %d rows in %s: %s to the slot, staging %s (Go copy %s, SQL versions, coverage and commit %s), "+
		"catch-up of %d tx %s, verification %s, capture's wait at the barrier %s, activation %s; %d writes",
		staged, total.Round(time.Millisecond), before.Round(time.Millisecond), stagingDur.Round(time.Millisecond),
		copyDur.Round(time.Millisecond), sqlDur.Round(time.Millisecond), caughtUp, catchUpDur.Round(time.Millisecond),
		verifyDur.Round(time.Millisecond), waitDur.Round(time.Millisecond), activateDur.Round(time.Millisecond), written)
	return []row{
		{Name: "bootstrap of a 1,000,000-row table", Value: float64(staged) / total.Seconds(), Unit: "rows/s",
			Baseline: "bare COPY TO STDOUT", BaseVal: copyRate, Target: ">= 100000"},
		{Name: "bootstrap staging (projections, versions, coverage, commit)", Value: float64(staged) / stagingDur.Seconds(), Unit: "rows/s",
			Baseline: "bare COPY TO STDOUT", BaseVal: copyRate},
		{Name: "bootstrap staging: Go fetch+render+COPY", Value: float64(staged) / copyDur.Seconds(), Unit: "rows/s",
			Baseline: "bare COPY TO STDOUT", BaseVal: copyRate},
		{Name: "bootstrap staging: SQL versions (stage_synced_rows), coverage + commit", Value: float64(staged) / sqlDur.Seconds(), Unit: "rows/s",
			Baseline: "bare COPY TO STDOUT", BaseVal: copyRate},
		{Name: "bootstrap floor: bare INSERT ... SELECT of the projections, versions and memberships it writes", Value: floor,
			Unit: "rows/s", Baseline: "bare COPY TO STDOUT", BaseVal: copyRate},
		{Name: fmt.Sprintf("bootstrap catch-up (%d tx to the barrier)", caughtUp), Value: catchUpDur.Seconds(), Unit: "s",
			Baseline: "whole bootstrap", BaseVal: total.Seconds()},
		{Name: "bootstrap verification + capture's wait at the barrier", Value: (verifyDur + waitDur).Seconds(), Unit: "s",
			Baseline: "whole bootstrap", BaseVal: total.Seconds()},
		{Name: "bootstrap activation (synchro.activate_bootstrap, 1,000,000 rows)", Value: activateDur.Seconds(), Unit: "s",
			Baseline: "whole bootstrap", BaseVal: total.Seconds()},
	}, nil
}
