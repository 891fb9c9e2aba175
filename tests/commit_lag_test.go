package tests

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/metrics"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// TestCommitLagGrowsBehindAHeldBackBacklog: capture is held back, one
// transaction materialized for every two committed, so the worker writes
// progress at every batch while it falls further behind. Commit lag is
// measured from source commit times: readiness goes unready on commit lag
// (the WAL lag stays far under its limit), and synchroctl status and the
// metric synchro_capture_lag_seconds show the lag growing past the limit.
func TestCommitLagGrowsBehindAHeldBackBacklog(t *testing.T) {
	t.Parallel()
	ctl := filepath.Join(buildCommands(t), "synchroctl")
	d := testdb.New(t)
	sharedDocs(t, d)
	configureReadiness(t, d, `'30 seconds'`, `1073741824`, `'1 second'`)
	release, done := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	cfg := workerConfig(d, "lag")
	cfg.BatchMaxTxns = 1
	cfg.AfterStep = func(s wal.Step) error {
		if s == wal.StepMaterialized && held.Load() {
			select {
			case <-release:
			case <-done:
			}
		}
		return nil
	}
	startStreaming(t, d, cfg)
	t.Cleanup(func() { close(done) }) // before the worker is stopped
	m := metrics.New(d.Pool)
	srv := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: d.Pool, Metrics: m}))
	defer srv.Close()
	waitCaptureReady(t, d)

	held.Store(true)
	next := 0
	// pump commits two transactions and lets the worker materialize one.
	pump := func() error {
		for range 2 {
			next++
			commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs VALUES (%d, 'backlog')`, next))
		}
		select {
		case release <- struct{}{}:
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("the worker materialized no batch in 30s")
		}
	}
	check := func(name string) (bool, string) {
		var ok bool
		var reason string
		if err := d.Pool.QueryRow(context.Background(), `SELECT ok, reason FROM synchro.readiness WHERE "check" = $1`, name).Scan(&ok, &reason); err != nil {
			t.Fatal(err)
		}
		return ok, reason
	}
	var reason string
	waitFor(t, "readiness unready on commit lag", 30*time.Second, func() (bool, error) {
		if err := pump(); err != nil {
			return false, err
		}
		var ok bool
		ok, reason = check("commit_lag")
		return !ok, nil
	})
	if !strings.Contains(reason, "exceeds the limit 1s") {
		t.Fatalf("commit_lag reason %q", reason)
	}
	if ok, walReason := check("wal_lag"); !ok {
		t.Fatalf("wal_lag failed too (%s): the test is meant to show commit lag on its own", walReason)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger`); n >= int64(next) {
		t.Fatalf("%d of %d transactions materialized: capture was not behind", n, next)
	}

	statusLag := func() float64 {
		code, out, stderr := run(t, ctl, "status", "--database-url", d.URL)
		if code != 3 {
			t.Fatalf("synchroctl status exited %d, want 3 (not ready); stderr: %s", code, stderr)
		}
		m := regexp.MustCompile(`(?m)^commit_lag +([0-9.]+)s$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("status shows no commit lag:\n%s", out)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	metricLag := func() float64 { return metricValue(t, scrape(t, srv.URL), "synchro_capture_lag_seconds") }
	firstStatus, firstMetric := statusLag(), metricLag()
	if firstStatus < 1 || firstMetric < 1 {
		t.Fatalf("status shows a commit lag of %vs and the metric %vs, want at least the limit 1s", firstStatus, firstMetric)
	}
	waitFor(t, "status and metric commit lag growing", 30*time.Second, func() (bool, error) {
		if err := pump(); err != nil {
			return false, err
		}
		return statusLag() > firstStatus && metricLag() > firstMetric, nil
	})
}
