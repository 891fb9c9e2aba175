package tests

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/reset"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// resetConfig is how tests run the reset coordinator: quick retries and
// progress lines, logs discarded unless given.
func resetConfig(d *testdb.DB, activate bool) reset.Config {
	return reset.Config{DatabaseURL: d.URL, Activate: activate, ProgressInterval: 200 * time.Millisecond,
		RetryInterval: 50 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// dropResetSlots drops, at the end of the test, every slot a reset of e's
// database created, once e's worker stopped streaming (a slot left behind
// would keep the test database from being dropped).
func dropResetSlots(t *testing.T, e *syncEnv) {
	d := e.d
	t.Cleanup(func() {
		e.w.stop(t)
		for _, s := range rowsOf(t, d, `SELECT candidate_slot FROM synchro.stream_reset`) {
			d.DropSlot(t, s)
		}
	})
}

// resetWriter commits one-row inserts into app.docs for user u1 (ids w-N) in
// the background until stopped, as an application that keeps writing during a
// reset (through a PostgreSQL restart too); stop returns the ids it committed.
type resetWriter struct {
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	ids      []string
	err      error
}

func startResetWriter(t *testing.T, d *testdb.DB, prefix string) *resetWriter {
	w := &resetWriter{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 1; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			id := fmt.Sprintf("%s-%05d", prefix, i)
			// A write that fails (PostgreSQL restarting) is tried again until
			// it is known committed: an INSERT that lost its connection may have.
			for attempt := 0; ; attempt++ {
				_, err := d.Pool.Exec(context.Background(), `INSERT INTO app.docs (id, owner_id, title) VALUES ($1, 'u1', $1)
					ON CONFLICT (id) DO NOTHING`, id)
				if err == nil {
					break
				}
				if attempt == 1000 {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			w.mu.Lock()
			w.ids = append(w.ids, id)
			w.mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a writer's pace, not a synchronization
		}
	}()
	t.Cleanup(func() { w.stop(t) })
	return w
}

func (w *resetWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ids)
}

func (w *resetWriter) stop(t *testing.T) []string {
	t.Helper()
	w.stopOnce.Do(func() { close(w.quit) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
	return append([]string(nil), w.ids...)
}

// resetCause blocks a streaming syncEnv's capture in a way that retrying cannot
// repair, and repairs what the operator would before resetting. ownCluster
// runs it on a cluster of its own (it changes server-wide settings).
type resetCause struct {
	name       string
	ownCluster bool
	block      func(t *testing.T, e *syncEnv)
	repair     func(t *testing.T, e *syncEnv)
}

var resetCauses = []resetCause{
	{name: "decoded_truncate",
		// A superuser lets a TRUNCATE through the guard (replica session, guard
		// enabled for ordinary sessions only): decoded, it blocks capture.
		block: func(t *testing.T, e *syncEnv) {
			e.d.Exec(t, `ALTER TABLE app.docs ENABLE TRIGGER synchro_truncate_guard`)
			e.d.Exec(t, `BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE app.docs CASCADE; COMMIT`)
		},
		repair: func(t *testing.T, e *syncEnv) {
			e.d.Exec(t, `ALTER TABLE app.docs ENABLE ALWAYS TRIGGER synchro_truncate_guard`)
		}},
	{name: "poison_retry_cannot_fix",
		// A rule fails on a row's image; repairing the row leaves the decoded
		// transaction failing on every retry (its image is the failing one).
		block: func(t *testing.T, e *syncEnv) {
			e.d.Exec(t, `CREATE TABLE app.gauges (id text PRIMARY KEY, owner_id text NOT NULL, title text);
				SELECT synchro.register_table('app.gauges', '{"kind":"sql","membership":"SELECT CASE WHEN $1->>''title'' = ''boom'' THEN (1/(length($1->>''id'') * 0))::text ELSE ''user:'' || ($1->>''owner_id'') END"}')`)
			waitMaterialized(t, e.d)
			waitCaptureReady(t, e.d)
			e.d.Exec(t, `INSERT INTO app.gauges VALUES ('g1', 'u2', 'boom')`)
			waitFor(t, "poison recorded", 30*time.Second, func() (bool, error) {
				return queryInt(t, e.d, `SELECT count(*) FROM synchro.poison_txn WHERE resolved_at IS NULL`) == 1, nil
			})
			id := queryText(t, e.d, `SELECT poison_id::text FROM synchro.poison_txn WHERE resolved_at IS NULL`)
			e.d.Exec(t, `UPDATE app.gauges SET title = 'fine' WHERE id = 'g1'`)
			e.d.Exec(t, `SELECT synchro.retry_poison(`+id+`)`)
			waitFor(t, "the retried poison fails again", 30*time.Second, func() (bool, error) {
				return queryInt(t, e.d, `SELECT attempts FROM synchro.poison_txn WHERE resolved_at IS NULL`) >= 2, nil
			})
		}},
	{name: "slot_invalidated", ownCluster: true,
		// The slot's WAL is removed past max_slot_wal_keep_size while the
		// worker is stopped (wal_status lost).
		block: func(t *testing.T, e *syncEnv) {
			e.w.stop(t)
			waitSlotInactive(t, e.d, e.cfg.Slot)
			e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('lost', 'u1', 'written while the slot is lost')`)
			e.d.Exec(t, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
			e.d.Exec(t, `SELECT pg_reload_conf()`)
			waitFor(t, "slot invalidated", 60*time.Second, func() (bool, error) {
				if err := e.d.ExecErr(`SELECT pg_switch_wal()`); err != nil {
					return false, err
				}
				if err := e.d.ExecErr(`CHECKPOINT`); err != nil {
					return false, err
				}
				return queryText(t, e.d, `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Slot) == "lost", nil
			})
			e.w = startWorker(t, e.d, e.cfg)
		},
		repair: func(t *testing.T, e *syncEnv) {
			e.d.Exec(t, `ALTER SYSTEM RESET max_slot_wal_keep_size`)
			e.d.Exec(t, `SELECT pg_reload_conf()`)
		}},
	{name: "publication_dropped",
		// Dropped, the publication can never be decoded again from the old slot
		// (pgoutput reads it under each change's catalog snapshot); the reset
		// creates it again before its candidate slot.
		block: func(t *testing.T, e *syncEnv) {
			e.d.Exec(t, `DROP PUBLICATION synchro`)
			e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('unpublished', 'u1', 'written without a publication')`)
		}},
}

// TestStreamReset recovers from each cause of a permanent block with a stream
// reset while a writer commits throughout: afterwards readiness is ready, the
// old cursor gets rebuild, the rebuilt scope equals the database row for row
// with a matching checksum, every write made during the reset is there once,
// and new writes flow incrementally.
func TestStreamReset(t *testing.T) {
	t.Parallel()
	for _, c := range resetCauses {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testStreamReset(t, c)
		})
	}
}

func testStreamReset(t *testing.T, cause resetCause) {
	var e *syncEnv
	if cause.ownCluster {
		e = newSyncEnvOn(t, testdb.NewAt(t, ownCluster(t)), "")
	} else {
		e = newSyncEnv(t, "")
	}
	recoverByReset(t, e, cause, func() reset.Result {
		res, err := reset.Run(context.Background(), resetConfig(e.d, true))
		if err != nil {
			t.Fatalf("reset: %v", err)
		}
		return res
	})
}

// recoverByReset blocks e's stream by cause, then recovers it by run (a reset
// that ends activated) while a writer commits throughout, and checks the
// outcome: readiness, the old cursor's rebuild, the rebuilt scope against the
// database, every write once, and incremental pulls after it.
func recoverByReset(t *testing.T, e *syncEnv, cause resetCause, run func() reset.Result) {
	dropResetSlots(t, e)
	e.connect(t, "u1", "c1")
	e.push(t, "u1", "c1", mut("m1", "docs", "insert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "one"}),
		mut("m2", "docs", "insert", map[string]any{"id": "d2"}, map[string]any{"owner_id": "u1", "title": "two"}))
	waitMaterialized(t, e.d)
	old := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, old)
	oldGen := queryText(t, e.d, `SELECT stream_generation::text FROM synchro.progress`)

	cause.block(t, e)
	waitFor(t, "capture blocked", 30*time.Second, func() (bool, error) {
		var ready bool
		err := e.d.Pool.QueryRow(context.Background(), `SELECT synchro.is_ready()`).Scan(&ready)
		return !ready, err
	})
	if cause.repair != nil {
		cause.repair(t, e)
	}
	w := startResetWriter(t, e.d, "w")
	waitFor(t, "writes before the reset", 10*time.Second, func() (bool, error) { return w.count() >= 20, nil })
	res := run()
	if res.Phase != "activated" {
		t.Fatalf("reset ended %s, want activated", res.Phase)
	}
	at := w.count()
	waitFor(t, "writes after activation", 10*time.Second, func() (bool, error) { return w.count() >= at+20, nil })
	written := w.stop(t)
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)
	if gen := queryText(t, e.d, `SELECT stream_generation::text FROM synchro.progress`); gen == oldGen {
		t.Fatal("the stream generation did not change")
	}

	requireResetActivated(t, e, res.ResetID)

	// The old cursor is answered with its scope in rebuild, and nothing else.
	body := requireOK(t, "pull with the old generation's cursor", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1",
		"scopes": map[string]any{"user:u1": map[string]any{"cursor": old.cursors["user:u1"]}}, "limit": 100}))
	if got := mustMarshal(t, body["rebuild"]); got != `["user:u1"]` {
		t.Fatalf("rebuild %s, want [\"user:u1\"]", got)
	}
	if n := len(body["changes"].([]any)); n != 0 {
		t.Fatalf("the old cursor got %d changes", n)
	}

	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 37, r) // checks the final checksum
	requireScopeEqualsDocs(t, e, r, "u1")
	have := map[string]bool{}
	for k := range r.rows["user:u1"] {
		have[k] = true
	}
	for _, id := range written {
		if !have[rowKey("docs", map[string]any{"id": id})] {
			t.Fatalf("write %s made during the reset is missing after it", id)
		}
	}

	// New writes flow incrementally from the rebuilt cursor.
	e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('after', 'u1', 'after')`)
	waitMaterialized(t, e.d)
	e.pullAll(t, "u1", "c1", 100, r)
	if _, ok := r.rows["user:u1"][rowKey("docs", map[string]any{"id": "after"})]; !ok {
		t.Fatal("a write after the reset did not reach the rebuilt replica incrementally")
	}
	requireScopeEqualsDocs(t, e, r, "u1")
	e.requireConverged(t, r, "user:u1")

	// History pruning reaches the stage's catch-up ledger too.
	e.d.Exec(t, `SELECT synchro.prune_capture_history('0 seconds', 100000)`)
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.event_ledger l JOIN synchro.stream_reset r ON r.target_generation = l.stream_generation
		WHERE r.phase = 'activated' AND l.commit_lsn < r.barrier_commit_lsn`); n != 0 {
		t.Fatalf("%d event-ledger rows of the stage's catch-up survive history pruning", n)
	}

	// A worker that takes over (here: started under another id, with the
	// --slot the stream began with) streams the slot the reset switched to.
	if err := e.w.stop(t); err != nil {
		t.Fatalf("worker stopped with %v", err)
	}
	standby := e.cfg
	standby.WorkerID = "standby"
	e.w = startWorker(t, e.d, standby)
	e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('after-takeover', 'u1', 'after')`)
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)
	e.pullAll(t, "u1", "c1", 100, r)
	requireScopeEqualsDocs(t, e, r, "u1")
}

// requireScopeEqualsDocs fails unless the replica's user:<user> scope holds
// exactly the user's rows of app.docs, each once with its current title.
func requireScopeEqualsDocs(t *testing.T, e *syncEnv, r *replica, user string) {
	t.Helper()
	want := rowsOf(t, e.d, `SELECT id || '=' || coalesce(title, '') FROM app.docs WHERE owner_id = $1`, user)
	sort.Strings(want)
	var got []string
	for k, row := range r.rows["user:"+user] {
		id := strings.TrimSuffix(strings.TrimPrefix(k, `docs/{"id":"`), `"}`)
		title, _ := row.Row["title"].(string)
		got = append(got, id+"="+title)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("scope user:%s holds %d rows, the database %d:\nreplica  %v\ndatabase %v", user, len(got), len(want), got, want)
	}
}

// requireResetActivated checks the durable state an activation leaves: the
// reset activated, the active slot its candidate, the generation its target
// starting at its barrier, no effect before the generation start, and every
// fence either covered by the baseline or materialized once in the new
// generation, never both.
func requireResetActivated(t *testing.T, e *syncEnv, id string) {
	t.Helper()
	if got := queryText(t, e.d, `
		SELECT r.phase || ' ' || (p.slot_name = r.candidate_slot) || ' ' || (p.stream_generation = r.target_generation)
		       || ' ' || (p.generation_start_lsn = r.baseline_lsn AND r.baseline_lsn < r.consistent_point)
		FROM synchro.stream_reset r, synchro.progress p WHERE r.reset_id = $1`, id); got != "activated true true true" {
		t.Fatalf("after activation: %s, want activated with the candidate slot, the target generation and the baseline as generation start", got)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.effect e JOIN synchro.stream_reset r ON r.target_generation = e.stream_generation
		WHERE r.reset_id = $1 AND e.commit_lsn <= r.barrier_commit_lsn`, id); n != 0 {
		t.Fatalf("%d effects of the new generation at or before its start (catch-up effects exposed)", n)
	}
	if n := queryInt(t, e.d, `
		SELECT count(*) FROM synchro.fence f
		WHERE (SELECT count(*) FROM synchro.reset_coverage c WHERE c.fence_id = f.fence_id AND c.reset_id = $1)
		    + (SELECT count(*) FROM synchro.event_ledger l JOIN synchro.progress p USING (stream_generation) WHERE l.fence_id = f.fence_id)
		    <> 1`, id); n != 0 {
		t.Fatalf("%d fences are not exactly once either covered by the baseline or materialized in the new generation", n)
	}
	if n := queryInt(t, e.d, `SELECT count(*) - count(DISTINCT (table_id, key, scope)) FROM synchro.membership m
		JOIN synchro.progress p USING (stream_generation) WHERE m.to_lsn IS NULL`); n != 0 {
		t.Fatalf("%d duplicate open membership edges in the new generation", n)
	}
}

// sqlPull runs synchro.pull for client's user:<user> scope from scratch,
// straight in SQL: the capture gate answers there before readiness is asked
// (the HTTP layer answers not_ready first while a reset runs).
func sqlPull(e *syncEnv, user, client string) error {
	return e.d.ExecErr(`SELECT synchro.pull($1, $2::jsonb, 100, 1000000)`, user,
		fmt.Sprintf(`{"client_id": %q, "scopes": {"user:%s": {"cursor": null}}}`, client, user))
}

// requireGated fails unless client's pull is refused capture_pending.
func requireGated(t *testing.T, e *syncEnv, user, client, when string) {
	t.Helper()
	if err := sqlPull(e, user, client); err == nil || !strings.Contains(err.Error(), "not yet captured") {
		t.Fatalf("%s: pull of client %s: %v, want capture_pending", when, client, err)
	}
}
