package tests

// Adversarial tests of capture history pruning (synchro.prune_capture_history,
// the worker's pruning loop): crashes at every worker step while pruning runs,
// concurrent pruning sessions under load, poison, the push path, zero-event
// transactions, argument edge cases, lock semantics and a stuck pruning call.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// auditInvariant lists, in one snapshot, every violation of what pruning must
// keep. Each materialized transaction of the active generation is either
//   - pruned: at or before capture_history.pruned_commit_lsn, acknowledged
//     (end_lsn <= acknowledged_end_lsn), with no event-ledger row and no fence
//     left; or
//   - intact: after the pruned boundary, with one event-ledger row per applied
//     event and one fence per event, each materialized at its commit.
//
// The pruned boundary is the commit of a materialized transaction. Fences are
// found by the source transaction's xid (fence.xid is its xid8), so a fence
// deleted without its event-ledger row, or the reverse, shows too.
const auditInvariant = `
	SELECT 'txn ' || l.commit_lsn::text || '..' || l.end_lsn::text || ' applied ' || l.applied_count
	       || ' event rows ' || ev.n || ' fences ' || fc.n || ' (not materialized at its commit: ' || fc.bad || ')'
	       || ' ack ' || coalesce(p.acknowledged_end_lsn::text, 'none')
	       || ' pruned through ' || coalesce(p.history_pruned_commit_lsn::text, 'none')
	FROM ` + auditProgress + `
	JOIN synchro.txn_ledger l ON l.stream_generation = p.stream_generation
	CROSS JOIN LATERAL (SELECT count(*) AS n FROM synchro.event_ledger e
	                    WHERE e.stream_generation = l.stream_generation AND e.commit_lsn = l.commit_lsn) ev
	CROSS JOIN LATERAL (SELECT count(*) AS n, count(*) FILTER (WHERE (SELECT e.commit_lsn FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)
	                                                              IS DISTINCT FROM l.commit_lsn) AS bad
	                    FROM synchro.fence f WHERE f.xid::text::bigint % 4294967296 = l.xid) fc
	WHERE NOT CASE WHEN l.commit_lsn <= coalesce(p.history_pruned_commit_lsn, p.generation_start_lsn)
	               THEN ev.n = 0 AND fc.n = 0 AND l.end_lsn <= p.acknowledged_end_lsn
	               ELSE ev.n = l.applied_count AND fc.n = l.applied_count AND fc.bad = 0 END
	UNION ALL
	SELECT 'pruned boundary ' || p.history_pruned_commit_lsn::text || ' is no materialized transaction'
	FROM ` + auditProgress + `
	WHERE p.history_pruned_commit_lsn IS NOT NULL
	  AND NOT EXISTS (SELECT FROM synchro.txn_ledger l
	                  WHERE l.stream_generation = p.stream_generation AND l.commit_lsn = p.history_pruned_commit_lsn)`

// auditProgress is the progress row with the boundary pruning recorded.
const auditProgress = `(SELECT p.*, h.pruned_commit_lsn AS history_pruned_commit_lsn
	FROM synchro.progress p LEFT JOIN synchro.capture_history h USING (stream_generation)) p`

// auditViolations runs auditInvariant; usable from any goroutine.
func auditViolations(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, auditInvariant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// requireHistoryInvariant fails the test on any auditInvariant violation.
func requireHistoryInvariant(t *testing.T, d *testdb.DB) {
	t.Helper()
	bad, err := auditViolations(context.Background(), d.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("capture history pruned wrongly:\n%s", strings.Join(bad, "\n"))
	}
}

// auditPrune calls synchro.prune_capture_history; usable from any goroutine.
func auditPrune(ctx context.Context, pool *pgxpool.Pool, keep string, maxTxns int) (txns, events int64, err error) {
	err = pool.QueryRow(ctx, `SELECT transactions, events FROM synchro.prune_capture_history($1::interval, $2)`,
		keep, maxTxns).Scan(&txns, &events)
	return txns, events, err
}

// auditErrors collects failures seen on goroutines other than the test's.
type auditErrors struct {
	mu   sync.Mutex
	errs []string
}

func (a *auditErrors) add(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) < 20 {
		a.errs = append(a.errs, fmt.Sprintf(format, args...))
	}
}

func (a *auditErrors) require(t *testing.T, what string) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) > 0 {
		t.Fatalf("%s:\n%s", what, strings.Join(a.errs, "\n"))
	}
}

// backgroundPruner prunes with keep '0' and small chunks on its own pool,
// checking auditInvariant after each call, until stopped. It counts what it
// pruned.
type backgroundPruner struct {
	stop          chan struct{}
	done          chan struct{}
	errs          auditErrors
	calls         atomic.Int64
	txns, events  atomic.Int64
	invariantRuns atomic.Int64
}

func startBackgroundPruner(t *testing.T, d *testdb.DB, sessions int) *backgroundPruner {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(sessions + 1)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &backgroundPruner{stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Paced, not synchronizing: each session calls about every 2 ms.
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			for {
				select {
				case <-p.stop:
					return
				case <-tick.C:
				}
				n, e, err := auditPrune(context.Background(), pool, "0", 1+rng.IntN(4))
				p.calls.Add(1)
				if err != nil {
					p.errs.add("pruning session %d: %v", s, err)
					continue
				}
				p.txns.Add(n)
				p.events.Add(e)
				if s == 0 {
					bad, err := auditViolations(context.Background(), pool)
					p.invariantRuns.Add(1)
					if err != nil {
						p.errs.add("invariant: %v", err)
					} else if len(bad) > 0 {
						p.errs.add("invariant violated:\n%s", strings.Join(bad, "\n"))
					}
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		pool.Close()
		close(p.done)
	}()
	t.Cleanup(p.halt)
	return p
}

// halt stops the pruner and waits for its sessions to end.
func (p *backgroundPruner) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// waitHistoryPruned waits until no event-ledger row and no fence is left.
func waitHistoryPruned(t *testing.T, d *testdb.DB) {
	t.Helper()
	waitFor(t, "capture history pruned", 30*time.Second, func() (bool, error) {
		var left int64
		err := d.Pool.QueryRow(context.Background(),
			`SELECT (SELECT count(*) FROM synchro.event_ledger) + (SELECT count(*) FROM synchro.fence)`).Scan(&left)
		return left == 0, err
	})
}

// requirePrunedThroughHighWatermark asserts that the pruned boundary is the
// materialized high-watermark (everything acknowledged was pruned).
func requirePrunedThroughHighWatermark(t *testing.T, d *testdb.DB) {
	t.Helper()
	if !queryBool(t, d, `SELECT history_pruned_commit IS NOT NULL AND history_pruned_commit = materialized_commit FROM synchro.stream_status()`) {
		t.Fatalf("history not pruned through the materialized high-watermark: %s", progressRow(t, d))
	}
}

// requireNoDuplicateEffects fails when one row version reaches one scope twice.
func requireNoDuplicateEffects(t *testing.T, d *testdb.DB) {
	t.Helper()
	if dup := rowsOf(t, d, `SELECT scope, table_id, key, coalesce(version, op), commit_lsn::text, count(*) FROM synchro.effect
		GROUP BY scope, table_id, key, coalesce(version, op), commit_lsn HAVING count(*) > 1`); len(dup) > 0 {
		t.Fatalf("duplicate effects: %v", dup)
	}
}

// crashWorkloadFences is how many fences (and applied events) crashTxn(i) makes.
func crashWorkloadFences(i int) int {
	if i == 0 {
		return 4
	}
	return 7
}

// TestPruneAuditCrashWindows stops the worker at each step between its durable
// steps while both the worker's own pruning (retention 1µs, every 5 ms) and a
// background pruning session run; at the crash point the hook itself prunes
// everything prunable and checks what is left. Then a fresh worker finishes.
// Pruning must never remove the history of a transaction that is materialized
// but not acknowledged (the materialized and slot-advanced windows) nor touch a
// fence that is not materialized, and the result must equal a crash-free run
// without pruning: one ledger row per source transaction, the same effects,
// edges, digests, versions and projections, no duplicate effect.
func TestPruneAuditCrashWindows(t *testing.T) {
	t.Parallel()
	want := crashFreeState(t)
	delete(want, "event_ledger")

	cases := []struct {
		name      string
		step      wal.Step
		pipelined bool
	}{
		{"received", wal.StepReceived, false},
		{"materialized", wal.StepMaterialized, false},
		{"slot_advanced", wal.StepSlotAdvanced, false},
		{"acknowledged", wal.StepAcknowledged, false},
		{"materialized_pipelined", wal.StepMaterialized, true},
		{"slot_advanced_pipelined", wal.StepSlotAdvanced, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, crashSetup)
			cfg := workerConfig(d, "pruning")
			cfg.HistoryRetention, cfg.PruneInterval = time.Microsecond, 5*time.Millisecond
			if tc.pipelined {
				cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 2*time.Second, -1, 3
			}
			bg := startBackgroundPruner(t, d, 1)

			var armed, fired atomic.Bool
			var hookErrs auditErrors
			var unackedAtCrash atomic.Int64
			crashCfg := cfg
			crashCfg.AfterStep = func(s wal.Step) error {
				if s != tc.step || !armed.Load() || fired.Load() {
					return nil
				}
				ctx := context.Background()
				if tc.step != wal.StepReceived {
					var n int64
					if err := d.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.txn_ledger`).Scan(&n); err != nil {
						return err
					}
					if n <= armedAt {
						return nil
					}
				}
				fired.Store(true)
				// Prune everything prunable now (the background session may hold
				// the pruning lock for a moment: call until nothing is left).
				deadline := time.Now().Add(20 * time.Second)
				for {
					if _, _, err := auditPrune(ctx, d.Pool, "0", 1000); err != nil {
						hookErrs.add("prune at the crash point: %v", err)
						break
					}
					var left bool
					if err := d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+auditProgress+` JOIN synchro.txn_ledger l USING (stream_generation)
						WHERE l.commit_lsn > coalesce(p.history_pruned_commit_lsn, p.generation_start_lsn) AND l.end_lsn <= p.acknowledged_end_lsn)`).Scan(&left); err != nil {
						hookErrs.add("prunable history: %v", err)
						break
					}
					if !left {
						break
					}
					if time.Now().After(deadline) {
						hookErrs.add("acknowledged history still unpruned at the crash point after 20s")
						break
					}
				}
				if bad, err := auditViolations(ctx, d.Pool); err != nil || len(bad) > 0 {
					hookErrs.add("at the crash point (%s): %v %s", s, err, strings.Join(bad, "\n"))
				}
				var unacked int64
				var pruned *string
				if err := d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM synchro.txn_ledger l WHERE l.end_lsn > p.acknowledged_end_lsn),
						p.history_pruned_commit_lsn::text FROM `+auditProgress).Scan(&unacked, &pruned); err != nil {
					hookErrs.add("read progress at the crash point: %v", err)
				}
				unackedAtCrash.Store(unacked)
				if pruned == nil {
					hookErrs.add("nothing was pruned before the crash point, though %d transactions were acknowledged", armedAt)
				}
				return errors.New("simulated crash")
			}
			w := startStreaming(t, d, crashCfg)
			var txns []committed
			for i := range crashTxns {
				if i == armedAt {
					waitMaterialized(t, d)
					waitAcknowledged(t, d)
					armed.Store(true)
				}
				txns = append(txns, commitTxn(t, d, crashTxn(i)))
			}
			if err := w.waitExit(t, 30*time.Second); !errors.Is(err, wal.ErrStopped) {
				t.Fatalf("crashing worker returned %v, want wal.ErrStopped", err)
			}
			if !fired.Load() {
				t.Fatal("the worker stopped without the hook firing")
			}
			hookErrs.require(t, "at the crash point")
			switch tc.step {
			case wal.StepMaterialized, wal.StepSlotAdvanced:
				// The window is real: some transaction was materialized and not
				// acknowledged, and pruning kept its history (invariant above).
				if unackedAtCrash.Load() == 0 {
					t.Fatalf("no materialized, unacknowledged transaction at the %s crash point", tc.step)
				}
			}

			// While no worker runs, pruning goes on and still leaves the
			// unacknowledged and unmaterialized history alone.
			if _, _, err := auditPrune(context.Background(), d.Pool, "0", 100000); err != nil {
				t.Fatal(err)
			}
			requireHistoryInvariant(t, d)
			for i, c := range txns {
				if queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, c.xid) > 0 {
					continue
				}
				if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f WHERE f.xid::text::bigint % 4294967296 = $1 AND NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`,
					c.xid); n != int64(crashWorkloadFences(i)) {
					t.Fatalf("unmaterialized transaction %d (xid %d) has %d pending fences, want %d", i, c.xid, n, crashWorkloadFences(i))
				}
			}

			log := logTo(&cfg)
			startWorker(t, d, cfg)
			waitMaterialized(t, d)
			waitAcknowledged(t, d)
			waitHistoryPruned(t, d)
			bg.halt()
			bg.errs.require(t, "background pruning")
			if bg.invariantRuns.Load() == 0 {
				t.Fatal("the background pruner never checked the invariant")
			}
			if tc.step == wal.StepSlotAdvanced && !strings.Contains(log.String(), "acknowledgement adopted from slot") {
				t.Fatalf("restarted worker did not adopt the slot position; log:\n%s", log)
			}
			for _, bad := range []string{"materialization failed", "capture history pruning failed", "capture blocked", "poison"} {
				if strings.Contains(log.String(), bad) {
					t.Fatalf("restarted worker logged %q:\n%s", bad, log)
				}
			}

			var wantXids []string
			for _, c := range txns {
				wantXids = append(wantXids, fmt.Sprint(c.xid))
			}
			if got := rowsOf(t, d, `SELECT xid FROM synchro.txn_ledger ORDER BY commit_lsn`); !slices.Equal(got, wantXids) {
				t.Fatalf("txn_ledger xids %v, want one row per source transaction %v", got, wantXids)
			}
			requireMaterializedOnce(t, d, 4, txns[0])
			requireMaterializedOnce(t, d, 7, txns[1:]...)
			requireNoDuplicateEffects(t, d)
			got := materializedState(t, d)
			delete(got, "event_ledger")
			requireSameState(t, "crash with pruning vs crash-free run without", want, got)
			requireEffectVersions(t, d)
			requireDigests(t, d)
			requireHistoryInvariant(t, d)
			requirePrunedThroughHighWatermark(t, d)
			requireProgressOrdering(t, d, cfg.Slot)
		})
	}
}

// auditLoadTxn is transaction i of load writer g: two inserts, then an update
// moving the writer's previous doc to another scope, an item update and an
// item delete. It returns the statements and the events (= fences) they make.
func auditLoadTxn(g, i int) (string, int) {
	sql := fmt.Sprintf(`INSERT INTO app.docs VALUES ('g%[1]d-%[2]d', 't', 'u%[3]d');
		INSERT INTO app.items VALUES (%[4]d, 'g%[1]d-%[2]d', 1);`, g, i, (g+i)%3, g*1000+i)
	events := 2
	if i > 0 {
		sql += fmt.Sprintf(`
		UPDATE app.docs SET title = 'v%[2]d', owner = 'u9' WHERE id = 'g%[1]d-%[3]d';
		UPDATE app.items SET qty = qty + 1 WHERE id = %[4]d;`, g, i, i-1, g*1000+i-1)
		events += 2
	}
	if i > 1 {
		sql += fmt.Sprintf(`
		DELETE FROM app.items WHERE id = %d;`, g*1000+i-2)
		events++
	}
	return sql, events
}

// auditCommit runs sql as one transaction on pool and returns its 32-bit xid.
func auditCommit(ctx context.Context, pool *pgxpool.Pool, sql string) (int64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, sql); err != nil {
		return 0, err
	}
	var xid8 string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid8); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	x, err := strconv.ParseUint(xid8, 10, 64)
	return int64(x % (1 << 32)), err
}

// TestPruneAuditConcurrentWithMaterialization: several writers commit many
// small transactions while three sessions call prune_capture_history in small
// chunks and the worker prunes by itself every 5 ms. No pruning call fails or
// deadlocks, the materializer never fails, every source transaction is
// materialized exactly once with all its events, the invariant holds in every
// sample, and the pruned events add up exactly to the applied events (nothing
// deleted twice, nothing skipped).
func TestPruneAuditConcurrentWithMaterialization(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, crashSetup)
	cfg, logs, metricsURL := pruningConfig(t, d, "loaded", 5*time.Millisecond)
	startStreaming(t, d, cfg)

	pcfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 4
	load, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer load.Close()

	bg := startBackgroundPruner(t, d, 3)
	const writers, perWriter = 4, 25
	var mu sync.Mutex
	wantEvents := map[int64]int{} // xid -> events
	var writeErrs auditErrors
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				sql, events := auditLoadTxn(g, i)
				xid, err := auditCommit(context.Background(), load, sql)
				if err != nil {
					writeErrs.add("writer %d txn %d: %v", g, i, err)
					return
				}
				mu.Lock()
				wantEvents[xid] = events
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	writeErrs.require(t, "writers")
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	waitHistoryPruned(t, d)
	bg.halt()
	bg.errs.require(t, "concurrent pruning sessions")
	t.Logf("sessions: %d calls, %d transactions, %d events pruned", bg.calls.Load(), bg.txns.Load(), bg.events.Load())
	// Which session wins the pruning lock is up to timing (under load the
	// worker's own call often waits behind each materialization and holds it):
	// the sessions must have raced, not necessarily won.
	if bg.calls.Load() < 50 || bg.invariantRuns.Load() == 0 {
		t.Fatalf("the pruning sessions made %d calls and checked the invariant %d times; the race did not happen",
			bg.calls.Load(), bg.invariantRuns.Load())
	}
	for _, bad := range []string{"failed", "capture blocked", "poison"} {
		if strings.Contains(logs.String(), bad) {
			t.Fatalf("worker logged %q under concurrent pruning:\n%s", bad, logs.String())
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("%d poison records under concurrent pruning", n)
	}

	// One ledger row per source transaction, with all its events.
	got := map[int64]int{}
	rows := rowsOf(t, d, `SELECT xid, event_count, applied_count FROM synchro.txn_ledger`)
	for _, r := range rows {
		parts := strings.Split(r, "|")
		xid, _ := strconv.ParseInt(parts[0], 10, 64)
		if parts[1] != parts[2] {
			t.Fatalf("transaction %s: events|applied %s|%s", parts[0], parts[1], parts[2])
		}
		if _, dup := got[xid]; dup {
			t.Fatalf("transaction %d materialized twice", xid)
		}
		got[xid], _ = strconv.Atoi(parts[2])
	}
	if len(got) != writers*perWriter || len(wantEvents) != writers*perWriter {
		t.Fatalf("%d transactions materialized, %d written, want %d", len(got), len(wantEvents), writers*perWriter)
	}
	total := 0
	for xid, n := range wantEvents {
		if got[xid] != n {
			t.Fatalf("transaction %d: %d events materialized, want %d", xid, got[xid], n)
		}
		total += n
	}
	requireNoDuplicateEffects(t, d)
	requireEffectVersions(t, d)
	requireDigests(t, d)
	requireHistoryInvariant(t, d)
	requirePrunedThroughHighWatermark(t, d)
	requireProgressOrdering(t, d, cfg.Slot)
	// Every event pruned exactly once: by the sessions or by the worker.
	waitFor(t, "pruned events add up", 30*time.Second, func() (bool, error) {
		worker := metricValue(t, scrape(t, metricsURL), "synchro_capture_history_pruned_events_total")
		if sum := bg.events.Load() + int64(worker); sum > int64(total) {
			return false, fmt.Errorf("pruned %d events (sessions %d, worker %v), only %d were materialized", sum, bg.events.Load(), worker, total)
		}
		return bg.events.Load()+int64(worker) == int64(total), nil
	})
}

// auditPoisonCase is one poison class for TestPruneAuditPoison.
type auditPoisonCase struct {
	name, prepare, poison, class, sqlstate string
	repair                                 string // repairs the cause; "" when only a stream reset could
}

// TestPruneAuditPoison: while a poison transaction blocks the stream, the
// worker's pruning (retention 1µs) and explicit calls prune exactly the history
// before it and touch nothing at or after it: the poison record, its fences
// and the later transaction's fences stay, progress stays before it, and a
// restarted worker still blocks. A repairable poison retried after the repair
// materializes with its original replay identity, and pruning then covers it
// and what follows. A forged fence message reusing the id of a pruned fence is
// refused as it was before pruning (the fence is not recorded).
func TestPruneAuditPoison(t *testing.T) {
	t.Parallel()
	cases := []auditPoisonCase{
		{name: "truncate", class: capture.ClassTruncate,
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_truncate_guard`,
			poison:  `INSERT INTO app.t VALUES ('p1', 'x', 'u1'); TRUNCATE app.t`},
		{name: "fence_trigger_disabled", class: capture.ClassFenceUnmatched,
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_fence`,
			poison:  `INSERT INTO app.t VALUES ('p2', 'x', 'u1')`},
		{name: "reused_pruned_fence_id", class: capture.ClassMaterialize, sqlstate: "XX001",
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_fence`,
			// The message is well formed and matches the row event; only its
			// fence id is old: one of the pruned fences (%s).
			poison: `INSERT INTO app.t VALUES ('p3', 'x', 'u1');
				SELECT pg_logical_emit_message(true, 'synchro.fence', jsonb_build_object(
					'registration_kind', 'synced', 'relation_id', r.relation_id,
					'relation', jsonb_build_object('schema', 'app', 'name', 't', 'oid', r.relation_oid::bigint),
					'op', 'insert', 'version', 'forged', 'fence_id', '%s'::uuid, 'ordinal', 1,
					'new_key', to_jsonb('p3'::text), 'table_id', st.table_id)::text)
				FROM synchro.relation r JOIN synchro.synced_table st USING (relation_id) WHERE r.relation_name = 't'`},
		{name: "rule_repaired", class: capture.ClassMaterialize, sqlstate: "22012",
			poison: `INSERT INTO app.r VALUES (2, 'boom'); INSERT INTO app.t VALUES ('p4', 'x', 'u1');
				UPDATE app.r SET title = 'fine' WHERE id = 1`,
			repair: `UPDATE synchro.synced_table SET scope_rule = jsonb_set(scope_rule, '{membership}', '"SELECT ''all''"') WHERE name = 'r'`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, poisonSetup)
			cfg := workerConfig(d, "w1")
			cfg.HistoryRetention, cfg.PruneInterval = time.Microsecond, 5*time.Millisecond
			log := logTo(&cfg)
			w := startStreaming(t, d, cfg)
			first := commitTxn(t, d, `INSERT INTO app.r VALUES (1, 'fine'); INSERT INTO app.other VALUES (1, 'x')`)
			before := []committed{first,
				commitTxn(t, d, `INSERT INTO app.t VALUES ('base', 'x', 'u1')`),
				commitTxn(t, d, `UPDATE app.other SET v = 'y' WHERE id = 1`)}
			waitMaterialized(t, d)
			waitAcknowledged(t, d)
			waitHistoryPruned(t, d)
			for _, c := range before {
				if h := historyOf(t, d, c); h.events != 0 || h.fences != 0 || h.ledger != 1 {
					t.Fatalf("history of a transaction before the poison: %+v", h)
				}
			}

			if tc.prepare != "" {
				d.Exec(t, tc.prepare)
			}
			poisonSQL := tc.poison
			if strings.Contains(poisonSQL, "%s") {
				poisonSQL = fmt.Sprintf(poisonSQL, first.fences[0])
			}
			bad := commitTxn(t, d, poisonSQL)
			later := commitTxn(t, d, `INSERT INTO app.other VALUES (2, 'z')`)
			waitPoison(t, d)
			waitBlocked(t, d, cfg.WorkerID, 200*time.Millisecond)
			p := readPoison(t, d, bad)
			if p.class != tc.class || derefS(p.sqlstate) != tc.sqlstate || p.xid != bad.xid {
				t.Fatalf("poison record %+v, want class %s sqlstate %q for xid %d", p, tc.class, tc.sqlstate, bad.xid)
			}

			// Pruning while blocked: by the worker (it keeps pruning while
			// blocked) and by hand, repeatedly.
			for range 5 {
				if n, e := prune(t, d, "0", 1000000); n != 0 || e != 0 {
					t.Fatalf("pruning while blocked found %d transactions, %d events: nothing after the last acknowledged one may be pruned", n, e)
				}
			}
			requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)
			requireHistoryInvariant(t, d)
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f WHERE f.fence_id = ANY ($1::uuid[]) AND NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`,
				bad.fences); n != int64(len(bad.fences)) {
				t.Fatalf("the poison transaction keeps %d of its %d fences pending", n, len(bad.fences))
			}
			if !queryBool(t, d, `SELECT history_pruned_commit < $1::pg_lsn AND history_pruned_commit = materialized_commit FROM synchro.stream_status()`, p.commitLSN) {
				t.Fatalf("pruned boundary %s, poison at %s", progressRow(t, d), p.commitLSN)
			}
			if again := readPoison(t, d, bad); poisonText(again) != poisonText(p) {
				t.Fatalf("pruning changed the poison record: %s, was %s", poisonText(again), poisonText(p))
			}

			// A new worker process after pruning still blocks at the same place.
			w.stop(t)
			cfg.WorkerID = "w2"
			startWorker(t, d, cfg)
			waitBlocked(t, d, cfg.WorkerID, 200*time.Millisecond)
			requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)
			requireHistoryInvariant(t, d)

			if tc.repair == "" {
				return
			}
			d.Exec(t, tc.repair)
			if !queryBool(t, d, `SELECT synchro.retry_poison($1)`, p.id) {
				t.Fatal("retry_poison returned false")
			}
			waitMaterialized(t, d)
			waitAcknowledged(t, d)
			waitHistoryPruned(t, d)
			commitLSN, endLSN, events, applied := ledgerOf(t, d, bad)
			if commitLSN != p.commitLSN || endLSN != p.endLSN || events != 3 || applied != 3 {
				t.Fatalf("retried transaction at %s..%s with %d/%d events, want the poison's identity %s..%s with 3/3",
					commitLSN, endLSN, events, applied, p.commitLSN, p.endLSN)
			}
			if !queryBool(t, d, `SELECT resolved_at IS NOT NULL FROM synchro.poison_txn WHERE poison_id = $1`, p.id) {
				t.Fatal("poison record not resolved")
			}
			requireMaterializedOnce(t, d, 1, later)
			if h := historyOf(t, d, bad); h.events != 0 || h.fences != 0 || h.ledger != 1 || h.effects == 0 {
				t.Fatalf("history of the retried transaction after pruning: %+v", h)
			}
			requireHistoryInvariant(t, d)
			requirePrunedThroughHighWatermark(t, d)
			requireNoDuplicateEffects(t, d)
			requireEffectVersions(t, d)
			requireDigests(t, d)
			requireProgressOrdering(t, d, cfg.Slot)
			if strings.Contains(log.String(), "capture history pruning failed") {
				t.Fatalf("pruning failed:\n%s", log)
			}
		})
	}
}

// poisonText renders a poison record for comparison.
func poisonText(p poisonRecord) string {
	return fmt.Sprintf("%d %s..%s %s xid %d sqlstate %q relation %s attempts %d retry %v resolved %v",
		p.id, p.commitLSN, p.endLSN, p.class, p.xid, derefS(p.sqlstate), deref(p.relationID), p.attempts, p.retryRequested, p.resolved)
}

// TestPruneAuditCaptureGateAndPushIdempotency: pruning never clears a client's
// pending push fence, so the capture gate keeps answering capture_pending for
// it however often pruning runs, while a client whose fence was pruned is
// served. Replayed pushes, of a mutation whose fence is pruned and of one whose
// fence is pending, return the recorded outcome and write nothing; compare and
// swap against a version whose fence is pruned still works; pull from a cursor
// older than the pruned history delivers everything.
func TestPruneAuditCaptureGateAndPushIdempotency(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one'), ('d2', 'u2', 'two')`)
	fast := e.epServer(t, func(s *httpapi.Sync) { s.CaptureWait = 50 * time.Millisecond })
	e.connect(t, "u1", "c1")
	e.connect(t, "u2", "c2")
	r1, r2 := newReplica(), newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r1)
	e.rebuildScope(t, "u2", "c2", "user:u2", 100, r2)
	original := r1.rows["user:u1"][rowKey("docs", map[string]any{"id": "d1"})].Version
	pullReq := func(client string, r *replica) map[string]any {
		scopes := map[string]any{}
		for s, c := range r.cursors {
			scopes[s] = map[string]any{"cursor": c}
		}
		return map[string]any{"client_id": client, "scopes": scopes}
	}
	applied := func(resp map[string]any, id string) map[string]any {
		t.Helper()
		list, o := outcome(t, resp, id)
		if list != "accepted" || o["status"] != "applied" || o["server_version"] == nil {
			t.Fatalf("mutation %s: %s %v, want applied", id, list, o)
		}
		return o
	}

	m2 := mut("m2", "docs", "update", map[string]any{"id": "d2"}, map[string]any{"title": "two-b"})
	o2 := applied(fast.push(t, "u2", "c2", m2), "m2")
	waitMaterialized(t, e.d)
	waitAcknowledged(t, e.d)
	e.pauseCapture(t)
	m1 := mut("m1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "one-b"})
	o1 := applied(fast.push(t, "u1", "c1", m1), "m1")
	v1 := o1["server_version"].(string)

	ledger := queryInt(t, e.d, `SELECT count(*) FROM synchro.txn_ledger`)
	if n, _ := prune(t, e.d, "0", 2147483647); n != ledger {
		t.Fatalf("pruned %d transactions, want all %d materialized and acknowledged ones", n, ledger)
	}
	for i := range 10 {
		prune(t, e.d, "0", 2147483647)
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.fence_pending WHERE client_id = 'c1'`); n != 1 {
			t.Fatalf("round %d: client c1 has %d pending fences, want its one push", i, n)
		}
		epRequireError(t, "pull with a pending push after pruning", fast.post(t, "u1", "/sync/pull", pullReq("c1", r1)),
			http.StatusServiceUnavailable, "capture_pending")
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.fence WHERE client_id = 'c2'`); n != 0 {
		t.Fatalf("client c2's materialized, acknowledged fence was not pruned (%d left)", n)
	}
	// Client c2 (fence pruned) is served from its old cursor, push included.
	r2.apply(t, requireOK(t, "pull of c2 after pruning", fast.post(t, "u2", "/sync/pull", pullReq("c2", r2))))
	if got := r2.rows["user:u2"][rowKey("docs", map[string]any{"id": "d2"})]; got.Version != o2["server_version"] || got.Row["title"] != "two-b" {
		t.Fatalf("c2 pulled %v version %s, pushed version %v", got.Row, got.Version, o2["server_version"])
	}

	// Replays return the recorded outcomes and write nothing.
	fences := queryInt(t, e.d, `SELECT count(*) FROM synchro.fence`)
	for _, r := range []struct {
		user, client string
		m, o         map[string]any
	}{{"u2", "c2", m2, o2}, {"u1", "c1", m1, o1}} {
		again := applied(fast.push(t, r.user, r.client, r.m), r.m["mutation_id"].(string))
		if mustMarshal(t, again) != mustMarshal(t, r.o) {
			t.Fatalf("replay of %s after pruning: %v, recorded %v", r.m["mutation_id"], again, r.o)
		}
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.fence`); n != fences {
		t.Fatalf("replayed pushes wrote fences: %d, was %d", n, fences)
	}
	if v := rowVersion(t, e.d, "app.docs", "d2"); v != o2["server_version"] {
		t.Fatalf("d2 version %s after the replay, want %v", v, o2["server_version"])
	}

	// The worker resumes with pruning: c1's fence is materialized, then pruned.
	cfg := e.cfg
	cfg.HistoryRetention, cfg.PruneInterval = time.Microsecond, 5*time.Millisecond
	e.w = startStreaming(t, e.d, cfg)
	waitMaterialized(t, e.d)
	waitAcknowledged(t, e.d)
	waitHistoryPruned(t, e.d)
	r1.apply(t, requireOK(t, "pull of c1 after capture", fast.post(t, "u1", "/sync/pull", pullReq("c1", r1))))
	if got := r1.rows["user:u1"][rowKey("docs", map[string]any{"id": "d1"})]; got.Version != v1 || got.Row["title"] != "one-b" {
		t.Fatalf("read-your-writes after pruning: pulled %v version %s, pushed %s", got.Row, got.Version, v1)
	}
	e.requireConverged(t, r1, "user:u1")

	// Compare and swap against the current version (its fence pruned) applies;
	// against the original version it conflicts.
	m3 := mut("m3", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "one-c"})
	m3["base_version"] = v1
	v3 := applied(fast.push(t, "u1", "c1", m3), "m3")["server_version"]
	stale := mut("m4", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "stale"})
	stale["base_version"] = original
	if list, o := outcome(t, fast.push(t, "u1", "c1", stale), "m4"); list != "rejected" || o["code"] != "version_conflict" || o["server_version"] != v3 {
		t.Fatalf("stale push after pruning: %s %v", list, o)
	}
	waitMaterialized(t, e.d)
	waitHistoryPruned(t, e.d)
	e.pullAll(t, "u1", "c1", 100, r1)
	e.requireConverged(t, r1, "user:u1")
	fresh := newReplica()
	e.connect(t, "u1", "c3")
	e.rebuildScope(t, "u1", "c3", "user:u1", 1, fresh)
	e.requireConverged(t, fresh, "user:u1")
	requireHistoryInvariant(t, e.d)
	requireDigests(t, e.d)
}

// TestPruneAuditZeroEventTransactions: transactions without applicable events
// (a logical message of another prefix, a registry change) between ones with
// events. Pruned in chunks of varying size, every call reports exactly the
// transactions and events of its window, the boundary advances onto a
// zero-event transaction too, and nothing is skipped or deleted twice.
func TestPruneAuditZeroEventTransactions(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	d.Exec(t, `CREATE TABLE app.plain (id int PRIMARY KEY)`)
	startStreaming(t, d, workerConfig(d, "zero"))
	txns := []committed{
		commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'a')`),
		commitTxn(t, d, `SELECT pg_logical_emit_message(true, 'app.audit', 'no rows')`),
		commitTxn(t, d, `SELECT pg_logical_emit_message(true, 'app.audit', 'again no rows')`),
		commitTxn(t, d, `INSERT INTO app.plain VALUES (1)`),
		commitTxn(t, d, `CREATE TABLE app.more (id int PRIMARY KEY);
			SELECT synchro.register_table('app.more', '{"kind":"shared","scope":"all"}')`),
		commitTxn(t, d, `INSERT INTO app.docs VALUES (2, 'b'); INSERT INTO app.more VALUES (1)`),
		commitTxn(t, d, `SELECT pg_logical_emit_message(true, 'app.audit', 'no rows')`),
		commitTxn(t, d, `UPDATE app.docs SET v = 'aa' WHERE id = 1; DELETE FROM app.docs WHERE id = 2`),
		commitTxn(t, d, `SELECT pg_logical_emit_message(true, 'app.audit', 'last, no rows')`),
	}
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	type row struct {
		commit  string
		applied int64
	}
	var ledger []row
	zero := 0
	for _, r := range rowsOf(t, d, `SELECT commit_lsn::text, applied_count FROM synchro.txn_ledger ORDER BY commit_lsn`) {
		parts := strings.Split(r, "|")
		n, _ := strconv.ParseInt(parts[1], 10, 64)
		ledger = append(ledger, row{parts[0], n})
		if n == 0 {
			zero++
		}
	}
	if zero < 4 || len(ledger) < 8 {
		t.Fatalf("ledger %v: want at least 8 transactions, 4 of them without events", ledger)
	}
	for _, i := range []int{1, 2, 6, 8} {
		requireMaterializedOnce(t, d, 0, txns[i])
	}
	requireMaterializedOnce(t, d, 2, txns[5], txns[7])

	pos := 0
	for call, k := range []int{1, 1, 1, 2, 3, 1, 100} {
		n, e := prune(t, d, "0", k)
		wantN := min(k, len(ledger)-pos)
		var wantE int64
		for _, r := range ledger[pos : pos+wantN] {
			wantE += r.applied
		}
		if n != int64(wantN) || e != wantE {
			t.Fatalf("call %d (max %d) from transaction %d: pruned %d transactions, %d events; want %d and %d (ledger %v)",
				call, k, pos, n, e, wantN, wantE, ledger)
		}
		if wantN > 0 {
			pos += wantN
			if got := queryText(t, d, `SELECT history_pruned_commit::text FROM synchro.stream_status()`); got != ledger[pos-1].commit {
				t.Fatalf("call %d: pruned boundary %s, want %s", call, got, ledger[pos-1].commit)
			}
		}
		requireHistoryInvariant(t, d)
	}
	if pos != len(ledger) {
		t.Fatalf("pruned %d of %d transactions", pos, len(ledger))
	}
	if n, e := prune(t, d, "0", 100); n != 0 || e != 0 {
		t.Fatalf("a further call pruned %d transactions, %d events", n, e)
	}
	waitHistoryPruned(t, d)

	// Capture goes on after a zero-event boundary; the next call prunes exactly it.
	next := commitTxn(t, d, `INSERT INTO app.docs VALUES (3, 'c')`)
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	requireMaterializedOnce(t, d, 1, next)
	if n, e := prune(t, d, "0", 100); e != 1 || n < 1 {
		t.Fatalf("pruned %d transactions, %d events after the zero-event boundary; want the new one's event", n, e)
	}
	requireHistoryInvariant(t, d)
	requireDigests(t, d)
	requireEffectVersions(t, d)
}

// TestPruneAuditArgumentsAndLocking: calls before any stream and before any
// acknowledgement return zeros; invalid arguments are refused (22023), the
// operator and service roles are refused (42501); the largest max_txns and a
// keep of '0 seconds' work. While one session's pruning is uncommitted another
// session's call returns zeros at once instead of waiting; the same session may
// call again (the lock is its own); a pruning rolled back leaves history and
// the boundary as they were, and the next call prunes it all.
func TestPruneAuditArgumentsAndLocking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// No stream.
	empty := testdb.New(t)
	if n, e := prune(t, empty, "0", 10); n != 0 || e != 0 {
		t.Fatalf("pruning before any stream: %d, %d", n, e)
	}
	// A stream without an acknowledgement.
	empty.Exec(t, `SELECT synchro.start_stream('no_slot', pg_current_wal_lsn(), now())`)
	if n, e := prune(t, empty, "0", 2147483647); n != 0 || e != 0 {
		t.Fatalf("pruning before any acknowledgement: %d, %d", n, e)
	}
	if queryText(t, empty, `SELECT coalesce(history_pruned_commit::text, 'none') FROM synchro.stream_status()`) != "none" {
		t.Fatal("the pruned boundary moved without anything pruned")
	}
	for _, sql := range []string{
		`SELECT synchro.prune_capture_history('0', NULL)`,
		`SELECT synchro.prune_capture_history('0', -5)`,
		`SELECT synchro.prune_capture_history('-1 microsecond', 1)`,
		`SELECT synchro.prune_capture_history(NULL, NULL)`,
	} {
		requireState(t, empty.ExecErr(sql), "22023", "retention of zero or more")
	}
	for _, role := range []string{"synchro_operator", "synchro_service"} {
		if err := asRole(t, empty, role, `SELECT * FROM synchro.prune_capture_history('0', 1)`); sqlState(err) != "42501" {
			t.Fatalf("%s called prune_capture_history: %v", role, err)
		}
	}

	d := testdb.New(t)
	sharedDocs(t, d)
	startStreaming(t, d, workerConfig(d, "args"))
	for i := range 3 {
		commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs VALUES (%d, 'x')`, i))
	}
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	if n, e := prune(t, d, "1 hour", 2147483647); n != 0 || e != 0 {
		t.Fatalf("young history pruned: %d, %d", n, e)
	}
	if n, e := prune(t, d, "0 seconds", 2147483647); n != 3 || e != 3 {
		t.Fatalf("pruned %d transactions, %d events; want 3 and 3", n, e)
	}
	for i := 3; i < 6; i++ {
		commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs VALUES (%d, 'x')`, i))
	}
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	boundary := queryText(t, d, `SELECT history_pruned_commit::text FROM synchro.stream_status()`)

	holder, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	var n, e int64
	if err := holder.QueryRow(ctx, `SELECT * FROM synchro.prune_capture_history('0', 1)`).Scan(&n, &e); err != nil || n != 1 || e != 1 {
		t.Fatalf("first session: %d, %d, %v", n, e, err)
	}
	// Another session: zeros at once, not a wait for the first.
	other, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SET LOCAL statement_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := other.QueryRow(ctx, `SELECT * FROM synchro.prune_capture_history('0', 100)`).Scan(&n, &e); err != nil || n != 0 || e != 0 {
		t.Fatalf("second session while the first prunes: %d, %d, %v (after %s)", n, e, err, time.Since(started))
	}
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The first session again, in the same transaction: the lock is its own.
	if err := holder.QueryRow(ctx, `SELECT * FROM synchro.prune_capture_history('0', 100)`).Scan(&n, &e); err != nil || n != 2 || e != 2 {
		t.Fatalf("first session's second call: %d, %d, %v", n, e, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryText(t, d, `SELECT history_pruned_commit::text FROM synchro.stream_status()`); got != boundary {
		t.Fatalf("a rolled-back pruning moved the boundary to %s (was %s)", got, boundary)
	}
	requireHistoryInvariant(t, d)
	if got := queryInt(t, d, `SELECT count(*) FROM synchro.event_ledger`); got != 3 {
		t.Fatalf("%d event-ledger rows after a rolled-back pruning, want 3", got)
	}
	if n, e := prune(t, d, "0", 100); n != 3 || e != 3 {
		t.Fatalf("after the rollback: pruned %d, %d; want 3 and 3", n, e)
	}
	requireHistoryInvariant(t, d)
	requirePrunedThroughHighWatermark(t, d)
}

// TestPruneAuditStuckPruningNeverStallsCapture: a pruning call that cannot
// finish (a fence it deletes is locked by another session) holds the pruning
// lock. Capture must go on meanwhile (pruning touches only rows materialization
// no longer writes), other pruning calls return zeros instead of queueing up,
// and once the lock is gone pruning completes.
func TestPruneAuditStuckPruningNeverStallsCapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.New(t)
	sharedDocs(t, d)
	startStreaming(t, d, workerConfig(d, "active"))
	first := commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'a')`)
	waitMaterialized(t, d)
	waitAcknowledged(t, d)

	locker, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx) //nolint:errcheck
	if _, err := locker.Exec(ctx, `SELECT FROM synchro.fence WHERE fence_id = $1::uuid FOR SHARE`, first.fences[0]); err != nil {
		t.Fatal(err)
	}
	// A standby worker (own pool) prunes: its call gets stuck on the lock.
	pool, err := pgxpool.New(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	scfg := workerConfig(d, "standby")
	scfg.HistoryRetention, scfg.PruneInterval = time.Microsecond, 5*time.Millisecond
	sctx, stopStandby := context.WithCancel(ctx)
	standbyDone := make(chan error, 1)
	go func() { standbyDone <- wal.New(scfg, pool).Run(sctx) }()
	// Stopped before the active worker (a cleanup), so it never takes the role.
	defer func() {
		stopStandby()
		<-standbyDone
	}()
	waitState(t, d, "standby", "standby")
	waitFor(t, "a pruning call waiting for the fence lock", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%prune_capture_history%')`).Scan(&ok)
		return ok, err
	})

	var later []committed
	for i := 2; i < 8; i++ {
		later = append(later, commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs VALUES (%d, 'x'); UPDATE app.docs SET v = 'y%d' WHERE id = 1`, i, i)))
	}
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	requireMaterializedOnce(t, d, 2, later...)
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	var n, e int64
	if err := tx.QueryRow(ctx, `SELECT * FROM synchro.prune_capture_history('0', 100)`).Scan(&n, &e); err != nil || n != 0 || e != 0 {
		t.Fatalf("a call while another is stuck: %d, %d, %v", n, e, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := historyOf(t, d, first); got.fences != 1 || got.events != 1 {
		t.Fatalf("history of the locked transaction while pruning is stuck: %+v", got)
	}

	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitHistoryPruned(t, d)
	requireHistoryInvariant(t, d)
	requirePrunedThroughHighWatermark(t, d)
	requireDigests(t, d)
}
