package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/metrics"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestSlotInvalidatedByWALRetention: the stream's slot is invalidated while the
// worker is stopped, because the WAL it needs went past max_slot_wal_keep_size
// and a checkpoint removed it (wal_status lost). The source transaction written
// meanwhile can never be decoded again. The restarted worker blocks before it
// reads WAL, saying once, in a bounded line without SQL or row data, that the
// slot was invalidated; it neither advances progress nor materializes anything,
// nor drops or recreates the slot. Readiness names the invalidated slot,
// synchroctl status exits 3 with that reason, and pull and rebuild answer 503
// not_ready. Runs on a cluster of its own: max_slot_wal_keep_size is server-wide.
func TestSlotInvalidatedByWALRetention(t *testing.T) {
	t.Parallel()
	ctl := filepath.Join(buildCommands(t), "synchroctl")
	d := testdb.NewAt(t, ownCluster(t))
	d.Exec(t, syncSchema)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	cfg := workerConfig(d, "lost")
	e := &syncEnv{d: d, cfg: cfg, url: serveSync(t, d)}
	e.w = startStreaming(t, d, cfg)
	e.connect(t, "u1", "c1")
	e.push(t, "u1", "c1", mut("m1", "docs", "insert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "kept"}))
	waitMaterialized(t, d)
	waitCaptureReady(t, d)
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r)
	e.pullAll(t, "u1", "c1", 100, r)

	e.w.stop(t)
	waitSlotInactive(t, d, cfg.Slot)
	const secret = "row-value-never-logged"
	pending := commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs (id, owner_id, title) VALUES ('d2', 'u1', '%s')`, secret))
	before := progressRow(t, d)

	d.Exec(t, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
	d.Exec(t, `SELECT pg_reload_conf()`)
	// The metrics an operator alerts on before the slot is lost, and after.
	metricsURL := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: d.Pool, Metrics: metrics.New(d.Pool)}))
	defer metricsURL.Close()
	waitFor(t, "a safe WAL size exported once max_slot_wal_keep_size is set", 30*time.Second, func() (bool, error) {
		return strings.Contains(scrape(t, metricsURL.URL), "\nsynchro_capture_slot_safe_wal_bytes "), nil
	})
	waitFor(t, "slot "+cfg.Slot+" invalidated (wal_status lost)", 60*time.Second, func() (bool, error) {
		// A segment switch and a checkpoint each round: the checkpoint removes
		// segments the slot no longer reserves and invalidates the slot.
		if err := d.ExecErr(`SELECT pg_switch_wal()`); err != nil {
			return false, err
		}
		if err := d.ExecErr(`CHECKPOINT`); err != nil {
			return false, err
		}
		var status *string
		err := d.Pool.QueryRow(context.Background(), `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&status)
		return status != nil && *status == "lost", err
	})
	if got := metricValue(t, scrape(t, metricsURL.URL), `synchro_capture_slot_wal_status{status="lost"}`); got != 1 {
		t.Fatalf(`synchro_capture_slot_wal_status{status="lost"} %v, want 1`, got)
	}
	slotReason := fmt.Sprintf("replication slot %s is invalidated (wal_status lost)", cfg.Slot)
	readyReason := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'slot' AND NOT ok`)
	if !strings.HasPrefix(readyReason, slotReason) {
		t.Fatalf("readiness slot check: %q, want it to start %q", readyReason, slotReason)
	}

	log := logTo(&cfg)
	e.w = startWorker(t, d, cfg)
	// Blocked over many retries (RetryInterval 50 ms), never streaming.
	waitBlocked(t, d, cfg.WorkerID, 500*time.Millisecond)
	// The worker blocks for the reason readiness gives (synchro.slot_problem).
	requireBlockedOnce(t, log.String(), readyReason)
	for _, leak := range []string{secret, "worker session failed"} {
		if strings.Contains(log.String(), leak) {
			t.Fatalf("the worker log holds %q:\n%s", leak, log)
		}
	}

	// Nothing moved, nothing was materialized or quarantined, and the slot is the
	// same invalidated one: not dropped, not recreated.
	if after := progressRow(t, d); after != before {
		t.Fatalf("progress changed:\nbefore %s\nafter  %s", before, after)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, pending.xid); n != 0 {
		t.Fatalf("the transaction whose WAL was lost was materialized")
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.event_ledger WHERE fence_id = ANY ($1::uuid[])`, pending.fences); n != 0 || len(pending.fences) != 1 {
		t.Fatalf("the fence of the lost transaction was materialized (%d of %d)", n, len(pending.fences))
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("a lost slot recorded a poison transaction")
	}
	if n := queryInt(t, d, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND wal_status = 'lost' AND restart_lsn IS NULL`, cfg.Slot); n != 1 {
		t.Fatalf("the invalidated slot was dropped or replaced")
	}

	// Readiness: the slot check names it, the worker check sees a blocked worker.
	if got := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'slot' AND NOT ok`); got != readyReason {
		t.Fatalf("readiness slot check: %q, want %q as before", got, readyReason)
	}
	if got := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'worker' AND NOT ok`); !strings.Contains(got, "blocked") {
		t.Fatalf("readiness worker check: %q, want a blocked worker", got)
	}
	if queryBool(t, d, `SELECT synchro.is_ready()`) {
		t.Fatal("synchro.is_ready() with an invalidated slot")
	}
	code, stdout, stderr := run(t, ctl, "status", "--database-url", d.URL)
	if code != 3 || !strings.HasPrefix(stdout, "READY: NO") || !strings.Contains(stdout, slotReason) ||
		!strings.Contains(stdout, "blocked") || !strings.Contains(stderr, "not ready: ") {
		t.Fatalf("synchroctl status exited %d, stderr %q:\n%s", code, stderr, stdout)
	}

	// Pull and rebuild are refused, not served from the stale projections.
	scopes := map[string]any{}
	for s, c := range r.cursors {
		scopes[s] = map[string]any{"cursor": c}
	}
	waitFor(t, "pull refused with not_ready", 30*time.Second, func() (bool, error) {
		p := e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "scopes": scopes, "limit": 100})
		switch {
		case p.Status == http.StatusServiceUnavailable && p.errorCode() == "not_ready":
			return true, nil
		case p.Status == http.StatusOK:
			return false, nil // the gate's answer from before, for at most its interval
		default:
			return false, fmt.Errorf("pull: %d %s", p.Status, p.Raw)
		}
	})
	requireError(t, "rebuild", e.post(t, "u1", "/sync/rebuild",
		map[string]any{"client_id": "c1", "scope": "user:u1", "limit": 100}), http.StatusServiceUnavailable, "not_ready")
}

// TestSlotDroppedWhileStreaming: someone terminates the worker's WAL sender
// and drops the stream's slot. The worker's session ends; the next one finds
// no slot and blocks, saying so once, and never creates one again (a new slot
// would start at the current WAL, skipping what was written since the
// acknowledgement): a transaction committed after the drop is never
// materialized, progress stays where it was, nothing is quarantined, and
// readiness fails.
func TestSlotDroppedWhileStreaming(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'x')`)
	waitMaterialized(t, d)
	waitState(t, d, cfg.WorkerID, "streaming")

	waitFor(t, "slot "+cfg.Slot+" dropped from under the worker", 30*time.Second, func() (bool, error) {
		// The worker's next session may take the slot again before the drop:
		// then the next round terminates that one.
		if err := d.ExecErr(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`, cfg.Slot); err != nil {
			return false, err
		}
		err := d.ExecErr(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, cfg.Slot)
		if err != nil && sqlState(err) != "55006" { // object_in_use: taken again meanwhile
			return false, err
		}
		var exists bool
		err = d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)`, cfg.Slot).Scan(&exists)
		return !exists, err
	})
	waitBlocked(t, d, cfg.WorkerID, 300*time.Millisecond)
	before := progressRow(t, d)
	pending := commitTxn(t, d, `INSERT INTO app.docs VALUES (2, 'after the drop')`)
	// More sessions, each finding the slot missing.
	waitBlocked(t, d, cfg.WorkerID, 500*time.Millisecond)

	if n := queryInt(t, d, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot); n != 0 {
		t.Fatalf("the worker created slot %s again", cfg.Slot)
	}
	if after := progressRow(t, d); after != before {
		t.Fatalf("progress changed:\nbefore %s\nafter  %s", before, after)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, pending.xid); n != 0 {
		t.Fatalf("a transaction committed after the drop was materialized")
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("a dropped slot recorded a poison transaction")
	}
	requireBlockedOnce(t, log.String(), "replication slot "+cfg.Slot+" is missing")
	if got := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'slot' AND NOT ok`); !strings.Contains(got, "is missing") {
		t.Fatalf("readiness slot check: %q", got)
	}
	if got := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'worker' AND NOT ok`); !strings.Contains(got, "blocked") {
		t.Fatalf("readiness worker check: %q, want a blocked worker", got)
	}
}

// requireBlockedOnce requires a worker log (logTo) to say "capture blocked"
// exactly once (not once per retry), in one bounded line naming each of wants
// and no poison transaction, and the log to hold no SQL text.
func requireBlockedOnce(t *testing.T, log string, wants ...string) {
	t.Helper()
	var blocked []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "capture blocked") {
			blocked = append(blocked, line)
		}
	}
	if len(blocked) != 1 || len(blocked[0]) > 400 || strings.Contains(blocked[0], "poison") {
		t.Fatalf("the worker log does not say capture blocked once, in one bounded line:\n%s", log)
	}
	for _, want := range wants {
		if !strings.Contains(blocked[0], want) {
			t.Fatalf("the worker's blocked line does not say %q:\n%s", want, log)
		}
	}
	for _, leak := range []string{"SELECT", "INSERT"} {
		if strings.Contains(log, leak) {
			t.Fatalf("the worker log holds %q:\n%s", leak, log)
		}
	}
}

// holdSlot creates a replication slot named name with create (SQL taking the
// name as $1) on a connection to the database at url, which stays open until
// the test ends or the returned func closes it: a temporary slot lives as long
// as that session.
func holdSlot(t *testing.T, url, create, name string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	release = func() { _ = conn.Close(context.Background()) }
	t.Cleanup(release)
	if _, err := conn.Exec(context.Background(), create, name); err != nil {
		t.Fatalf("create slot %s: %v", name, err)
	}
	return release
}

// TestSlotNameOfAnotherDatabase starts a stream whose slot name another
// database's slot already holds (two Synchro databases on one cluster, the
// second without a slot name of its own): the worker blocks, saying whose slot
// it is and what to do, instead of failing every session with "already
// exists"; once that slot is gone it starts the stream.
func TestSlotNameOfAnotherDatabase(t *testing.T) {
	t.Parallel()
	other := testdb.New(t)
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	cfg.Slot = other.CreateSlot(t)
	log := logTo(&cfg)
	startWorker(t, d, cfg)
	waitBlocked(t, d, cfg.WorkerID, 300*time.Millisecond)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.progress`); n != 0 {
		t.Fatalf("a stream started on another database's slot")
	}
	requireBlockedOnce(t, log.String(), "replication slot "+cfg.Slot+" belongs to database "+other.Name,
		"slot names are cluster-wide", "SYNCHRO_SLOT")
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	if got := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'worker'`); !strings.HasPrefix(got, "no stream started (newest heartbeat: worker w1, blocked, ") {
		t.Fatalf("readiness worker check: %q, want no stream started and the blocked worker", got)
	}

	other.DropSlot(t, cfg.Slot)
	waitState(t, d, cfg.WorkerID, "streaming")
	commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'x')`)
	waitMaterialized(t, d)
}
