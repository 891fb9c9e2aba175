package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestWorkerRefusesSlotOtherThanTheActiveStreams: the durable stream record
// (synchro.progress) names the active slot. A worker started with another
// --slot, even one that exists in this database, blocks before it reads any
// WAL, with an error that names both, and readiness names both; it neither
// materializes nor advances either slot.
func TestWorkerRefusesSlotOtherThanTheActiveStreams(t *testing.T) {
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
	const slots = `SELECT slot_name || ' ' || confirmed_flush_lsn || ' ' || active FROM pg_replication_slots WHERE slot_name IN ($1, $2) ORDER BY 1`
	slotsBefore := rowsOf(t, d, slots, cfg.Slot, other)

	wrong := cfg
	wrong.WorkerID, wrong.Slot = "w2", other
	log := logTo(&wrong)
	startWorker(t, d, wrong)
	waitBlocked(t, d, "w2", 300*time.Millisecond)

	for _, want := range []string{`the active stream's slot is ` + cfg.Slot, `started with --slot ` + other} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("worker log does not say %q:\n%s", want, log.String())
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, pending.xid); n != 0 {
		t.Fatalf("the worker on slot %s materialized a transaction", other)
	}
	if got := rowsOf(t, d, slots, cfg.Slot, other); strings.Join(got, ",") != strings.Join(slotsBefore, ",") {
		t.Fatalf("slots %v, were %v", got, slotsBefore)
	}
	waitFor(t, "readiness naming both slots", 30*time.Second, func() (bool, error) {
		var reason string
		err := d.Pool.QueryRow(context.Background(), `SELECT reason FROM synchro.readiness WHERE "check" = 'worker' AND NOT ok`).Scan(&reason)
		return strings.Contains(reason, "worker w2 runs with --slot "+other+", but the active stream's slot is "+cfg.Slot), err
	})
}
