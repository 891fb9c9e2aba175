package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

const crashSetup = `CREATE SCHEMA app;
	CREATE TABLE app.docs (id text PRIMARY KEY, title text, owner text);
	CREATE TABLE app.items (id int PRIMARY KEY, doc text, qty int);
	SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner}"}');
	SELECT synchro.register_table('app.items', '{"kind":"column","template":"doc:{doc}"}')`

const crashTxns = 20

// armedAt is the number of crash workload transactions written before the crash
// hook is armed.
const armedAt = 5

// crashTxn is source transaction i of the crash workload: inserts into both
// tables, a doc moving to another scope, an item update and an item delete.
func crashTxn(i int) string {
	sql := fmt.Sprintf(`INSERT INTO app.docs VALUES ('d%[1]da', 't', 'u%[2]d'), ('d%[1]db', 't', 'u%[3]d');
		INSERT INTO app.items VALUES (%[4]d, 'd%[1]da', 1), (%[5]d, 'd%[1]db', 2);`, i, i%3, (i+1)%3, i*10+1, i*10+2)
	if i > 0 {
		sql += fmt.Sprintf(`
		UPDATE app.docs SET title = 'v%[1]d', owner = 'u9' WHERE id = 'd%[2]da';
		UPDATE app.items SET qty = qty + 1 WHERE id = %[3]d;
		DELETE FROM app.items WHERE id = %[4]d;`, i, i-1, (i-1)*10+1, (i-1)*10+2)
	}
	return sql
}

// progressSnapshot reads the slot position beside durable progress.
type progressSnapshot struct {
	slot, ack, processed      string
	slotAhead, processedAhead bool // slot after ack; processed after ack
	ledger                    int64
	fences                    int64
}

func snapshotProgress(ctx context.Context, d *testdb.DB, slot string) (progressSnapshot, error) {
	var s progressSnapshot
	err := d.Pool.QueryRow(ctx, `
		SELECT sl.confirmed_flush_lsn::text, coalesce(p.acknowledged_end_lsn, p.generation_start_lsn)::text, p.processed_end_lsn::text,
		       sl.confirmed_flush_lsn > coalesce(p.acknowledged_end_lsn, p.generation_start_lsn),
		       p.processed_end_lsn > coalesce(p.acknowledged_end_lsn, p.generation_start_lsn),
		       (SELECT count(*) FROM synchro.txn_ledger), (SELECT count(*) FROM synchro.fence)
		FROM synchro.progress p JOIN pg_replication_slots sl ON sl.slot_name = $1`, slot).
		Scan(&s.slot, &s.ack, &s.processed, &s.slotAhead, &s.processedAhead, &s.ledger, &s.fences)
	return s, err
}

// requireProgressOrdering samples progress beside the running worker's slot:
// every sample keeps acknowledgement <= processed, materialized_end <= processed
// and the slot at or after the acknowledgement, and eventually the slot equals it.
func requireProgressOrdering(t *testing.T, d *testdb.DB, slot string) {
	t.Helper()
	waitFor(t, "slot == acknowledgement", 30*time.Second, func() (bool, error) {
		var ordered, equal bool
		err := d.Pool.QueryRow(context.Background(), `
			SELECT coalesce(p.acknowledged_end_lsn, p.generation_start_lsn) <= p.processed_end_lsn
			       AND coalesce(p.materialized_end_lsn <= p.processed_end_lsn, true)
			       AND sl.confirmed_flush_lsn >= coalesce(p.acknowledged_end_lsn, p.generation_start_lsn),
			       coalesce(sl.confirmed_flush_lsn = p.acknowledged_end_lsn, false)
			FROM synchro.progress p JOIN pg_replication_slots sl ON sl.slot_name = $1`, slot).Scan(&ordered, &equal)
		if err == nil && !ordered {
			err = errors.New("progress ordering violated")
		}
		return equal, err
	})
}

// crashFreeState materializes the crash workload without a fault and returns
// the materialized state crash runs must end with.
func crashFreeState(t *testing.T) map[string][]string {
	t.Helper()
	ref := testdb.New(t)
	ref.Exec(t, crashSetup)
	rw := startStreaming(t, ref, workerConfig(ref, "ref"))
	for i := range crashTxns {
		commitTxn(t, ref, crashTxn(i))
	}
	waitMaterialized(t, ref)
	rw.stop(t)
	return materializedState(t, ref)
}

// TestCrashWindows stops the worker at each step between its durable steps, as a
// crash would, while a workload is written, then lets a fresh worker finish. The
// result must equal a crash-free run: one ledger row per source transaction, no
// duplicate effect, every fence materialized, the same effects, edges, digests
// and versions, and the slot at the acknowledgement.
func TestCrashWindows(t *testing.T) {
	t.Parallel()
	want := crashFreeState(t)
	if len(want["txn_ledger"]) != crashTxns {
		t.Fatalf("crash-free run materialized %d transactions, want %d", len(want["txn_ledger"]), crashTxns)
	}

	cases := []struct {
		name      string
		step      wal.Step
		midBatch  bool
		pipelined bool // batches of 3 that fill up: each is materialized while the next is received
	}{
		{"received", wal.StepReceived, false, false},
		{"materialized", wal.StepMaterialized, false, false},
		{"slot_advanced", wal.StepSlotAdvanced, false, false},
		{"acknowledged", wal.StepAcknowledged, false, false},
		{"received_mid_batch", wal.StepReceived, true, false},
		{"received_pipelined", wal.StepReceived, false, true},
		// Preparing the next batch while the one before it materializes (the
		// status sender runs meanwhile).
		{"preparing_pipelined", wal.StepPreparing, false, true},
		{"materialized_pipelined", wal.StepMaterialized, false, true},
		{"slot_advanced_pipelined", wal.StepSlotAdvanced, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, crashSetup)
			cfg := workerConfig(d, "crashing")
			if tc.midBatch {
				cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 2*time.Second, -1, 1000
			}
			if tc.pipelined {
				cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 2*time.Second, -1, 3
			}
			var armed, fired atomic.Bool
			atCrash := make(chan progressSnapshot, 1)
			crashCfg := cfg
			crashCfg.AfterStep = func(s wal.Step) error {
				if s != tc.step || !armed.Load() || fired.Load() {
					return nil
				}
				snap, err := snapshotProgress(context.Background(), d, cfg.Slot)
				if err != nil {
					return err // stops the worker too; reported below
				}
				// A durable step stops the worker once a transaction written after
				// arming is durable.
				if tc.step != wal.StepReceived && !tc.midBatch && snap.ledger <= armedAt {
					return nil
				}
				fired.Store(true)
				atCrash <- snap
				return errors.New("simulated crash")
			}
			w := startStreaming(t, d, crashCfg)
			armed.Store(tc.midBatch)
			var xids []int64
			for i := range crashTxns {
				if i == armedAt && !tc.midBatch {
					// The worker has caught up with the first transactions; the
					// rest are written while it runs into the crash.
					waitMaterialized(t, d)
					armed.Store(true)
				}
				xids = append(xids, commitTxn(t, d, crashTxn(i)).xid)
			}
			if err := w.waitExit(t, 30*time.Second); !errors.Is(err, wal.ErrStopped) {
				t.Fatalf("crashing worker returned %v, want wal.ErrStopped", err)
			}
			var snap progressSnapshot
			select {
			case snap = <-atCrash:
			default:
				t.Fatalf("worker stopped without the hook firing")
			}
			t.Logf("positions at the crash: %+v", snap)
			// The crash hit the intended window.
			switch tc.step {
			case wal.StepMaterialized:
				if !snap.processedAhead || snap.slotAhead {
					t.Fatalf("at the crash: %+v; want processed after the acknowledgement and the slot at it", snap)
				}
			case wal.StepSlotAdvanced:
				if !snap.slotAhead {
					t.Fatalf("at the crash: %+v; want the slot after the acknowledgement", snap)
				}
			case wal.StepAcknowledged:
				if snap.slotAhead || snap.slot != snap.ack {
					t.Fatalf("at the crash: %+v; want the slot at the acknowledgement", snap)
				}
			case wal.StepReceived:
				if tc.midBatch && (snap.ledger != 0 || snap.fences != queryInt(t, d, `SELECT count(*) FROM synchro.fence`)) {
					t.Fatalf("at the crash: %+v; want the whole workload buffered in one batch and nothing materialized", snap)
				}
			}
			after, err := snapshotProgress(context.Background(), d, cfg.Slot)
			if err != nil {
				t.Fatal(err)
			}
			if tc.step == wal.StepSlotAdvanced && !after.slotAhead {
				t.Fatalf("after the crash: %+v; want the slot after the acknowledgement", after)
			}

			log := logTo(&cfg)
			startWorker(t, d, cfg)
			waitMaterialized(t, d)
			if tc.step == wal.StepSlotAdvanced && !strings.Contains(log.String(), "acknowledgement adopted from slot") {
				t.Fatalf("restarted worker did not adopt the slot position; log:\n%s", log)
			}

			got := rowsOf(t, d, `SELECT xid FROM synchro.txn_ledger ORDER BY commit_lsn`)
			var wantXids []string
			for _, x := range xids {
				wantXids = append(wantXids, fmt.Sprint(x))
			}
			if !slices.Equal(got, wantXids) {
				t.Fatalf("txn_ledger xids %v, want one row per source transaction %v", got, wantXids)
			}
			if dup := rowsOf(t, d, `SELECT scope, table_id, key, version, count(*) FROM synchro.effect
				GROUP BY scope, table_id, key, version HAVING count(*) > 1`); len(dup) > 0 {
				t.Fatalf("duplicate effects: %v", dup)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f
				WHERE NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`); n != 0 {
				t.Fatalf("%d fences not materialized exactly", n)
			}
			requireSameState(t, "crash vs crash-free run", want, materializedState(t, d))
			requireEffectVersions(t, d)
			requireDigests(t, d)
			requireProgressOrdering(t, d, cfg.Slot)
		})
	}
}

// progressRow renders the whole progress row.
func progressRow(t *testing.T, d *testdb.DB) string {
	t.Helper()
	return queryText(t, d, `SELECT p::text FROM synchro.progress p`)
}

// waitSlotInactive waits until no walsender holds the slot.
func waitSlotInactive(t *testing.T, d *testdb.DB, slot string) {
	t.Helper()
	waitFor(t, "slot "+slot+" released", 30*time.Second, func() (bool, error) {
		var active bool
		err := d.Pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return !active, err
	})
}

// requireRefusedAtStartup starts a worker over an illegal slot position: it must
// block before reading WAL, materialize nothing and leave progress unchanged.
// It returns the worker's log.
func requireRefusedAtStartup(t *testing.T, d *testdb.DB, pending committed) string {
	t.Helper()
	before := progressRow(t, d)
	cfg := workerConfig(d, "refusing")
	log := logTo(&cfg)
	startWorker(t, d, cfg)
	waitBlocked(t, d, "refusing", 300*time.Millisecond)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f WHERE f.fence_id = ANY ($1::uuid[]) AND NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`, pending.fences); n != int64(len(pending.fences)) || n == 0 {
		t.Fatalf("pending fences were materialized")
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, pending.xid); n != 0 {
		t.Fatalf("pending transaction was materialized")
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("a slot refusal recorded a poison transaction")
	}
	if after := progressRow(t, d); after != before {
		t.Fatalf("progress changed:\nbefore %s\nafter  %s", before, after)
	}
	return log.String()
}

// TestStartupRefusesSlotAfterProcessedBoundary: a slot position after the
// durable processed boundary could skip unmaterialized transactions.
func TestStartupRefusesSlotAfterProcessedBoundary(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	w := startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'x')`)
	waitMaterialized(t, d)
	w.stop(t)
	pending := commitTxn(t, d, `INSERT INTO app.docs VALUES (2, 'pending')`)
	waitSlotInactive(t, d, cfg.Slot)
	d.Exec(t, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, cfg.Slot)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.progress p, pg_replication_slots s
		WHERE s.slot_name = $1 AND s.confirmed_flush_lsn > p.processed_end_lsn`, cfg.Slot); n != 1 {
		t.Fatalf("setup: slot is not after the processed boundary")
	}
	requireRefusedAtStartup(t, d, pending)
}

// TestStartupRefusesSlotBeforeGenerationStart: a slot position before the
// generation start belongs to no position of this stream generation.
func TestStartupRefusesSlotBeforeGenerationStart(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	w := startStreaming(t, d, cfg)
	w.stop(t)
	pending := commitTxn(t, d, `INSERT INTO app.docs VALUES (2, 'pending')`)
	d.Exec(t, `WITH l AS (SELECT pg_current_wal_lsn() AS x)
		UPDATE synchro.progress SET generation_start_lsn = l.x, processed_end_lsn = l.x, acknowledged_end_lsn = NULL,
		       materialized_commit_lsn = NULL, materialized_end_lsn = NULL FROM l`)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.progress p, pg_replication_slots s
		WHERE s.slot_name = $1 AND s.confirmed_flush_lsn < p.generation_start_lsn`, cfg.Slot); n != 1 {
		t.Fatalf("setup: slot is not before the generation start")
	}
	requireRefusedAtStartup(t, d, pending)
}

// TestStartupRefusesReplacedSlot: someone dropped the stream's slot while the
// worker was stopped and created another under its name: a pgoutput slot (at
// a later position: a new slot starts at the current WAL, past a transaction
// the stream has not processed), a test_decoding one, a temporary one (held by
// its session), a physical one, or one in another database. The worker refuses
// each at startup with a reason naming what is wrong (and, but for the later
// position, without taking it for a position problem), adopts, advances, drops
// and recreates nothing, and readiness fails its slot or positions check.
func TestStartupRefusesReplacedSlot(t *testing.T) {
	t.Parallel()
	logical := `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`
	cases := []struct {
		name     string
		other    bool   // the replacement is created in another database
		create   string // SQL creating the replacement; $1 is the slot name
		reason   string // in the worker's log
		check    string // a readiness check that fails, with
		readyWhy string // this in its reason
		slotIs   string // the replacement afterwards: slot_type/plugin/temporary/database is this database
	}{
		{"pgoutput at a later position", false, logical, "after the processed boundary", "positions", "after the processed boundary", "logical/pgoutput/f/t"},
		{"test_decoding", false, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, "is not a pgoutput logical slot",
			"slot", "is not a pgoutput logical slot", "logical/test_decoding/f/t"},
		{"temporary", false, `SELECT pg_create_logical_replication_slot($1, 'pgoutput', true)`, "is temporary",
			"slot", "is temporary", "logical/pgoutput/t/t"},
		{"physical", false, `SELECT pg_create_physical_replication_slot($1, true)`, "is not a pgoutput logical slot",
			"slot", "is not a pgoutput logical slot", "physical//f/f"},
		{"in another database", true, logical, "belongs to database", "slot", "belongs to database", "logical/pgoutput/f/f"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			sharedDocs(t, d)
			configureReadiness(t, d, `'1 hour'`, `1073741824`, `'1 hour'`)
			cfg := workerConfig(d, "w1")
			w := startStreaming(t, d, cfg)
			commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'x')`)
			waitMaterialized(t, d)
			w.stop(t)
			waitSlotInactive(t, d, cfg.Slot)
			pending := commitTxn(t, d, `INSERT INTO app.docs VALUES (2, 'pending')`)
			d.Exec(t, `SELECT pg_drop_replication_slot($1)`, cfg.Slot)
			url := d.URL
			if tc.other {
				url = testdb.BaseURL(t)
			}
			// Deferred calls run before cleanups, also after a t.Fatal: a temporary
			// slot goes with its session before the worker's cleanup drops the slot.
			defer holdSlot(t, url, tc.create, cfg.Slot)()
			log := requireRefusedAtStartup(t, d, pending)
			requireBlockedOnce(t, log, cfg.Slot, tc.reason)
			if got := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE NOT ok AND "check" = $1`, tc.check); !strings.Contains(got, tc.readyWhy) {
				t.Fatalf("readiness %s check: %q, want it to mention %q", tc.check, got, tc.readyWhy)
			}
			if queryBool(t, d, `SELECT synchro.is_ready()`) {
				t.Fatal("synchro.is_ready() over a replaced slot")
			}
			if got := queryText(t, d, `SELECT concat_ws('/', slot_type, coalesce(plugin, ''), temporary, database IS NOT DISTINCT FROM current_database())
				FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot); got != tc.slotIs {
				t.Fatalf("the replacement slot is now %s, want it untouched (%s)", got, tc.slotIs)
			}
		})
	}
}

// TestStartupAdvancesSlotToAcknowledgement: a slot behind the durable
// acknowledgement (a slot advance that did not survive a crash) is advanced to
// it at startup, and streaming continues from there.
func TestStartupAdvancesSlotToAcknowledgement(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	d.Exec(t, `CREATE TABLE app.hidden (id int PRIMARY KEY)`)
	cfg := workerConfig(d, "w1")
	w := startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'x')`)
	waitMaterialized(t, d)
	w.stop(t)
	// Only unpublished writes follow, so everything up to the acknowledgement
	// recorded here holds no source transaction.
	commitTxn(t, d, `INSERT INTO app.hidden SELECT generate_series(1, 100)`)
	ack := queryText(t, d, `WITH l AS (SELECT pg_current_wal_lsn() AS x)
		UPDATE synchro.progress SET processed_end_lsn = l.x, acknowledged_end_lsn = l.x FROM l RETURNING l.x::text`)
	if n := queryInt(t, d, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn < $2::pg_lsn`, cfg.Slot, ack); n != 1 {
		t.Fatalf("setup: slot is not behind the acknowledgement")
	}
	cfg.WorkerID = "w2"
	log := logTo(&cfg)
	startWorker(t, d, cfg)
	waitState(t, d, cfg.WorkerID, "streaming")
	// Streaming starts only after the startup repair.
	if n := queryInt(t, d, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn >= $2::pg_lsn`, cfg.Slot, ack); n != 1 {
		t.Fatalf("slot was not advanced to the acknowledgement %s", ack)
	}
	if !strings.Contains(log.String(), "slot advanced to durable acknowledgement") {
		t.Fatalf("worker log does not report the slot advance:\n%s", log)
	}
	c := commitTxn(t, d, `INSERT INTO app.docs VALUES (2, 'y')`)
	waitMaterialized(t, d)
	ledgerOf(t, d, c)
	requireProgressOrdering(t, d, cfg.Slot)
}

// TestSecondWorkerStandsBy: one worker holds the worker role; another waits in
// standby and takes over the stream when the first stops, without replaying
// anything twice.
func TestSecondWorkerStandsBy(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "first")
	first := startStreaming(t, d, cfg)
	waitState(t, d, "first", "streaming")
	cfg.WorkerID = "second"
	startWorker(t, d, cfg)
	waitState(t, d, "second", "standby")
	var xids []string
	for i := range 3 {
		xids = append(xids, fmt.Sprint(commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs VALUES (%d, 'x')`, i)).xid))
	}
	waitMaterialized(t, d)
	first.stop(t)
	for i := 3; i < 6; i++ {
		xids = append(xids, fmt.Sprint(commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs VALUES (%d, 'x')`, i)).xid))
	}
	waitMaterialized(t, d)
	waitState(t, d, "second", "streaming")
	if got := rowsOf(t, d, `SELECT xid FROM synchro.txn_ledger ORDER BY commit_lsn`); !slices.Equal(got, xids) {
		t.Fatalf("txn_ledger xids %v, want %v", got, xids)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.effect`); n != 6 {
		t.Fatalf("%d effects, want 6", n)
	}
	requireProgressOrdering(t, d, cfg.Slot)
}
