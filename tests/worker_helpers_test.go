package tests

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// runningWorker is a capture worker running in the test process.
type runningWorker struct {
	cancel context.CancelFunc
	done   chan error
}

// workerConfig is the configuration tests run workers with: the test database's
// own slot, quick batches and idle acknowledgements.
func workerConfig(d *testdb.DB, id string) wal.Config {
	return wal.Config{
		DatabaseURL:       d.URL,
		Slot:              "w_" + strings.ReplaceAll(strings.ToLower(d.Name), "-", "_"),
		Publication:       "synchro",
		WorkerID:          id,
		BatchMaxDelay:     5 * time.Millisecond,
		IdleAckInterval:   100 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		RetryInterval:     50 * time.Millisecond,
		Log:               slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// startWorker runs a worker until stop or the end of the test; the slot it
// creates is dropped at the end of the test.
func startWorker(t *testing.T, d *testdb.DB, cfg wal.Config) *runningWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &runningWorker{cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- wal.New(cfg, d.Pool).Run(ctx) }()
	t.Cleanup(func() {
		w.stop(t)
		d.DropSlot(t, cfg.Slot)
	})
	return w
}

// stop ends the worker and returns what Run returned.
func (w *runningWorker) stop(t *testing.T) error {
	t.Helper()
	w.cancel()
	select {
	case err, ok := <-w.done:
		if ok {
			close(w.done)
			return err
		}
		return nil
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not stop within 30s")
		return nil
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitMaterialized waits until every fence written so far is materialized and
// the stream has processed the WAL written so far.
func waitMaterialized(t *testing.T, d *testdb.DB) {
	t.Helper()
	var target string
	if err := d.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_flush_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "materialization", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(), `
			SELECT NOT EXISTS (SELECT FROM synchro.fence WHERE materialized_lsn IS NULL)
			   AND EXISTS (SELECT FROM synchro.progress WHERE processed_end_lsn >= $1::pg_lsn)`, target).Scan(&ok)
		return ok, err
	})
}
