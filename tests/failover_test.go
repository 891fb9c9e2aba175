package tests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestWorkerFailoverAfterSIGKILL runs two synchrod processes on one database:
// one holds the worker role, the other stands by. Killing the active one with
// SIGKILL while writes continue hands the role to the other within 10 s, and
// every source transaction ends up materialized exactly once.
func TestWorkerFailoverAfterSIGKILL(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(buildCommands(t), "synchrod")
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.events (id bigint PRIMARY KEY, owner text NOT NULL);
		SELECT synchro.register_table('app.events', '{"kind":"column","template":"user:{owner}"}')`)
	slot := synchrodSlot()
	t.Cleanup(func() { d.DropSlot(t, slot) })

	procs := map[string]*exec.Cmd{}
	for _, id := range []string{"a", "b"} {
		cmd := command(context.Background(), bin, "--database-url", d.URL, "--listen", freeAddr(t), "--slot", slot,
			"--worker-id", id, "--heartbeat-interval", "100ms")
		var stderr lockedBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[id] = cmd
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("synchrod %s log:\n%s", id, stderr.String())
			}
		})
	}

	active := func() string {
		var id string
		err := d.Pool.QueryRow(context.Background(), `
			SELECT worker_id FROM synchro.worker_heartbeat
			WHERE state = 'streaming' AND heartbeat_at > now() - interval '1 second'
			ORDER BY heartbeat_at DESC LIMIT 1`).Scan(&id)
		if err != nil {
			return ""
		}
		return id
	}
	var first string
	waitFor(t, "a worker streaming", 30*time.Second, func() (bool, error) {
		first = active()
		return first != "", nil
	})

	// Writes continue throughout: one transaction per statement.
	var wg sync.WaitGroup
	stopWrites := make(chan struct{})
	var written int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stopWrites:
				return
			default:
			}
			if _, err := d.Pool.Exec(context.Background(), `INSERT INTO app.events VALUES ($1, $2)`, i, fmt.Sprintf("u%d", i%5)); err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			written = i
		}
	}()
	waitFor(t, "some writes materialized", 30*time.Second, func() (bool, error) {
		var n int
		err := d.Pool.QueryRow(context.Background(), `SELECT count(*) FROM synchro.txn_ledger`).Scan(&n)
		return n >= 20, err
	})

	killedAt := time.Now()
	if err := procs[first].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"a": "b", "b": "a"}[first]
	waitFor(t, "the standby to take over", 10*time.Second, func() (bool, error) {
		return active() == other, nil
	})
	t.Logf("worker %s took over %s after SIGKILL of %s", other, time.Since(killedAt).Round(time.Millisecond), first)

	waitFor(t, "writes after the takeover", 30*time.Second, func() (bool, error) {
		var n int
		err := d.Pool.QueryRow(context.Background(), `SELECT count(*) FROM synchro.txn_ledger WHERE materialized_at > $1`, killedAt).Scan(&n)
		return n >= 20, err
	})
	close(stopWrites)
	wg.Wait()
	waitMaterialized(t, d)

	var ledger, distinctXid, effects, distinctEffects, fences int
	if err := d.Pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM synchro.txn_ledger),
		       (SELECT count(DISTINCT xid) FROM synchro.txn_ledger),
		       (SELECT count(*) FROM synchro.effect),
		       (SELECT count(*) FROM (SELECT DISTINCT scope, table_id, key, version FROM synchro.effect) e),
		       (SELECT count(*) FROM synchro.fence f WHERE EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id))`).
		Scan(&ledger, &distinctXid, &effects, &distinctEffects, &fences); err != nil {
		t.Fatal(err)
	}
	if ledger != written || distinctXid != written || fences != written {
		t.Fatalf("%d transactions written; ledger %d (distinct xid %d), fences materialized %d", written, ledger, distinctXid, fences)
	}
	if effects != written || distinctEffects != written {
		t.Fatalf("%d effects (%d distinct) for %d single-row inserts", effects, distinctEffects, written)
	}
}

// TestSynchrodSIGTERMRecordsStopped: synchrod stopped by SIGTERM exits 0 once its
// worker has recorded the state stopped in its heartbeat row, so readiness says
// at once that no worker streams.
func TestSynchrodSIGTERMRecordsStopped(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(buildCommands(t), "synchrod")
	d := testdb.New(t)
	slot, addr := synchrodSlot(), freeAddr(t)
	stop := startSynchrod(t, d, bin, addr, slot, "--database-url", d.URL, "--listen", addr, "--slot", slot,
		"--worker-id", "term", "--heartbeat-interval", "100ms")
	waitFor(t, "the worker streaming", 30*time.Second, func() (bool, error) {
		return queryBool(t, d, `SELECT EXISTS (SELECT FROM synchro.worker_heartbeat WHERE worker_id = 'term' AND state = 'streaming')`), nil
	})
	stop()
	if t.Failed() {
		t.FailNow() // synchrod did not exit cleanly
	}
	if got := queryText(t, d, `SELECT state FROM synchro.worker_heartbeat WHERE worker_id = 'term'`); got != "stopped" {
		t.Fatalf("heartbeat state after SIGTERM %q, want stopped", got)
	}
	configureReadiness(t, d, `'1 hour'`, `1073741824`, `'60 seconds'`)
	if got := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'worker' AND NOT ok`); !strings.Contains(got, "term, stopped") {
		t.Fatalf("readiness worker check %q, want it to name worker term stopped", got)
	}
}

// TestKilledWorkerMaterializationEnds: PostgreSQL runs a statement to its end
// after its client died unless told to check. A synchrod killed while it
// materializes a slow batch (here a scope rule that sleeps) must not leave the
// batch running, holding the progress row that the worker taking over waits
// for: the materialization ends within seconds of the kill.
func TestKilledWorkerMaterializationEnds(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(buildCommands(t), "synchrod")
	d := testdb.New(t)
	// The sleep is wrapped in a function declared IMMUTABLE: a rule may call no
	// VOLATILE built-in such as pg_sleep itself.
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.slow (id int PRIMARY KEY);
		CREATE FUNCTION app.slow_scope(jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN pg_sleep(60) IS NULL THEN 'all' END $$;
		SELECT synchro.register_table('app.slow', '{"kind":"sql","membership":"SELECT app.slow_scope($1)"}')`)
	slot := synchrodSlot()
	t.Cleanup(func() { d.DropSlot(t, slot) })
	cmd := command(context.Background(), bin, "--database-url", d.URL, "--listen", freeAddr(t), "--slot", slot,
		"--worker-id", "slow", "--heartbeat-interval", "100ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	running := func() (bool, error) {
		var n int
		err := d.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND query LIKE '%synchro.materialize_transaction%'
			  AND pid <> pg_backend_pid()`).Scan(&n)
		return n > 0, err
	}
	waitFor(t, "a worker streaming", 30*time.Second, func() (bool, error) {
		return queryBool(t, d, `SELECT EXISTS (SELECT FROM synchro.worker_heartbeat WHERE worker_id = 'slow' AND state = 'streaming')`), nil
	})
	d.Exec(t, `INSERT INTO app.slow VALUES (1)`)
	waitFor(t, "the slow batch materializing", 30*time.Second, running)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed worker's materialization to end", 10*time.Second, func() (bool, error) {
		r, err := running()
		return !r, err
	})
}
