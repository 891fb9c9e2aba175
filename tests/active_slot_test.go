package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestWorkerFollowsTheActiveSlot: the durable stream record (synchro.progress)
// names the active slot, the pointer only a stream reset's activation
// switches. A worker started with another --slot, even one that exists in this
// database, streams the active slot: it materializes what was pending, leaves
// the other slot as it was, says which slot it streams, and its heartbeat
// names the active slot, so readiness holds.
func TestWorkerFollowsTheActiveSlot(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	cfg := workerConfig(d, "w1")
	w := startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'a')`)
	waitMaterialized(t, d)
	if err := w.stop(t); err != nil {
		t.Fatalf("worker stopped with %v", err)
	}

	other := d.CreateSlot(t)
	pending := commitTxn(t, d, `INSERT INTO app.docs VALUES (2, 'b')`)
	const slot = `SELECT slot_name || ' ' || confirmed_flush_lsn || ' ' || active FROM pg_replication_slots WHERE slot_name = $1`
	otherBefore := queryText(t, d, slot, other)

	flagged := cfg
	flagged.WorkerID, flagged.Slot = "w2", other
	log := logTo(&flagged)
	startWorker(t, d, flagged)
	waitMaterialized(t, d)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, pending.xid); n != 1 {
		t.Fatalf("the pending transaction was materialized %d times, want once", n)
	}
	if !strings.Contains(log.String(), "slot="+cfg.Slot) || !strings.Contains(log.String(), "flag_slot="+other) {
		t.Fatalf("worker log does not say it streams the active slot %s rather than %s:\n%s", cfg.Slot, other, log.String())
	}
	if got := queryText(t, d, slot, other); got != otherBefore {
		t.Fatalf("slot %s is %s, was %s", other, got, otherBefore)
	}
	waitFor(t, "the heartbeat naming the active slot, and readiness", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(), `SELECT synchro.is_ready() AND EXISTS (SELECT FROM synchro.worker_heartbeat
			WHERE worker_id = 'w2' AND slot_name = $1)`, cfg.Slot).Scan(&ok)
		return ok, err
	})
}
