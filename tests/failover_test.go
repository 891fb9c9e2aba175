package tests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
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
		       (SELECT count(*) FROM synchro.fence WHERE materialized_lsn IS NOT NULL)`).
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
