package tests

// Retention of the pull history (synchro.prune_history): the horizon, the
// cursors and rebuild sessions it overtakes, and what pruning must never take
// from a position at or after it.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// horizon is the active generation's retention horizon ("0/0" before any pruning).
func horizon(t *testing.T, d *testdb.DB) string {
	t.Helper()
	return queryText(t, d, `SELECT synchro.history_horizon_lsn(stream_generation)::text FROM synchro.progress`)
}

// pruneHistoryTo runs pruning batches of one transaction each, with a zero
// retention, until the horizon is at commitLSN (failing if it passes it).
func pruneHistoryTo(t *testing.T, d *testdb.DB, commitLSN string) {
	t.Helper()
	for i := 0; ; i++ {
		var h string
		var reached, passed bool
		if err := d.Pool.QueryRow(context.Background(),
			`SELECT p.horizon::text, p.horizon >= $1::pg_lsn, p.horizon > $1::pg_lsn
			 FROM synchro.prune_history('0', 1, now()) p`, commitLSN).Scan(&h, &reached, &passed); err != nil {
			t.Fatal(err)
		}
		if passed {
			t.Fatalf("the horizon passed %s: %s", commitLSN, h)
		}
		if reached {
			return
		}
		if i > 10000 {
			t.Fatalf("the horizon does not reach %s (at %s)", commitLSN, h)
		}
	}
}

// pruneAll prunes the pull history with a zero retention, batch after batch,
// until nothing is left behind the last materialized transaction, and returns
// how many transactions the horizon passed.
func pruneAll(t *testing.T, d *testdb.DB) int64 {
	t.Helper()
	var total int64
	for {
		n := queryInt(t, d, `SELECT transactions FROM synchro.prune_history('0', 1000, now())`)
		if n == 0 {
			return total
		}
		total += n
	}
}

// pullScopes pulls the given scope cursors once (limit 1000) and returns the answer.
func (e *syncEnv) pullScopes(t *testing.T, user, client string, cursors map[string]any) map[string]any {
	t.Helper()
	scopes := map[string]any{}
	for s, c := range cursors {
		scopes[s] = map[string]any{"cursor": c}
	}
	return requireOK(t, "pull", e.post(t, user, "/sync/pull", map[string]any{"client_id": client, "scopes": scopes, "limit": 1000}))
}

// A cursor one transaction behind the horizon is answered with its scope in
// rebuild (no change, no cursor); one exactly at the horizon resumes with
// every change after it and an exact checksum; connect says the same. The
// rebuild after the horizon converges, and pruning removed what it must:
// effects at or before the horizon, superseded versions, closed edges and
// superseded digests, while every digest stays consistent.
func TestHistoryHorizonCursorBehindRebuildsCursorAtResumes(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	const scope = "user:u1"
	behind, at := newReplica(), newReplica()
	for _, c := range []string{"behind", "at"} {
		e.connect(t, "u1", c)
	}

	d := e.d
	d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('a', 'u1', 'a1'), ('b', 'u1', 'b1'), ('c', 'u2', 'c1')`)
	waitMaterialized(t, d)
	behind.cursors[scope] = nil
	e.rebuildScope(t, "u1", "behind", scope, 1000, behind)

	d.Exec(t, `UPDATE app.docs SET title = 'a2' WHERE id = 'a'`)
	d.Exec(t, `UPDATE app.docs SET owner_id = 'u2' WHERE id = 'b'`) // b leaves the scope: its edge closes
	waitMaterialized(t, d)
	e.rebuildScope(t, "u1", "at", scope, 1000, at)
	hw := queryText(t, d, `SELECT materialized_commit_lsn::text FROM synchro.progress`)

	d.Exec(t, `UPDATE app.docs SET title = 'a3' WHERE id = 'a'`)
	d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d', 'u1', 'd1')`)
	waitMaterialized(t, d)
	effectsBefore := queryInt(t, d, `SELECT count(*) FROM synchro.effect WHERE commit_lsn <= $1::pg_lsn`, hw)
	if effectsBefore == 0 {
		t.Fatal("no effects to prune")
	}

	pruneHistoryTo(t, d, hw)
	if got := horizon(t, d); got != hw {
		t.Fatalf("horizon %s, want %s", got, hw)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.effect WHERE commit_lsn <= $1::pg_lsn`, hw); n != 0 {
		t.Fatalf("%d effects at or before the horizon left", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE to_lsn <= $1::pg_lsn`, hw); n != 0 {
		t.Fatalf("%d edges closed at or before the horizon left", n)
	}
	// a: a1 and a2 at or before the horizon, a3 after it: a2 stays (the
	// version at the horizon), a1 goes.
	if got := queryInt(t, d, `SELECT count(*) FROM synchro.row_version v JOIN synchro.synced_table t USING (table_id)
		WHERE t.name = 'docs' AND v.key = 'a'`); got != 2 {
		t.Fatalf("row a keeps %d versions, want 2 (at the horizon and after it)", got)
	}
	if got := queryInt(t, d, `SELECT count(*) FROM synchro.scope_digest WHERE scope = $1 AND commit_lsn <= $2::pg_lsn`, scope, hw); got != 1 {
		t.Fatalf("scope keeps %d digests at or before the horizon, want 1", got)
	}
	requireDigests(t, d)

	// One behind: rebuild; at the horizon: resumes.
	body := e.pullScopes(t, "u1", "behind", behind.cursors)
	if rebuild := body["rebuild"].([]any); !slices.Equal(rebuild, []any{scope}) || len(body["changes"].([]any)) != 0 {
		t.Fatalf("a cursor behind the horizon: rebuild %v, changes %v", rebuild, body["changes"])
	}
	if _, ok := body["scope_cursors"].(map[string]any)[scope]; ok {
		t.Fatalf("a cursor behind the horizon got a cursor: %s", mustMarshal(t, body))
	}
	known := map[string]any{scope: map[string]any{"cursor": behind.cursors[scope]}}
	conn := requireOK(t, "connect", e.post(t, "u1", "/sync/connect", map[string]any{
		"client_id": "behind", "protocol_version": 3, "known_scopes": known}))
	if !slices.Equal(conn["rebuild"].([]any), []any{scope}) {
		t.Fatalf("connect with a cursor behind the horizon: rebuild %v", conn["rebuild"])
	}
	body = e.pullAll(t, "u1", "at", 1000, at)
	if len(body["rebuild"].([]any)) != 0 {
		t.Fatalf("a cursor at the horizon was sent to rebuild: %s", mustMarshal(t, body))
	}
	e.requireConverged(t, at, scope)

	e.rebuildScope(t, "u1", "behind", scope, 1, behind)
	e.requireConverged(t, behind, scope)
	e.pullAll(t, "u1", "behind", 1000, behind)
	e.requireConverged(t, behind, scope)
}

// A rebuild session whose position the horizon passes between two pages is
// refused with 410 rebuild_expired (retryable); restarted, it converges and
// pull continues from its final cursor.
func TestHistoryHorizonExpiresOvertakenRebuild(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	const scope = "user:u1"
	d := e.d
	d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) SELECT 'd' || i, 'u1', 't' FROM generate_series(1, 5) i`)
	waitMaterialized(t, d)
	e.connect(t, "u1", "c1")
	first := requireOK(t, "rebuild", e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": scope, "cursor": nil, "limit": 2}))
	if first["has_more"] != true {
		t.Fatalf("first page: %s", mustMarshal(t, first))
	}

	d.Exec(t, `UPDATE app.docs SET title = 'u' WHERE id = 'd1'`)
	waitMaterialized(t, d)
	pruneHistoryTo(t, d, queryText(t, d, `SELECT materialized_commit_lsn::text FROM synchro.progress`))

	r := e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": scope, "cursor": first["cursor"], "limit": 2})
	requireError(t, "rebuild page after the horizon passed its position", r, http.StatusGone, "rebuild_expired")
	if r.Body["error"].(map[string]any)["retryable"] != true {
		t.Fatalf("rebuild_expired is not retryable: %s", r.Raw)
	}
	rep := newReplica()
	e.rebuildScope(t, "u1", "c1", scope, 2, rep)
	e.requireConverged(t, rep, scope)
	d.Exec(t, `UPDATE app.docs SET title = 'v' WHERE id = 'd2'`)
	waitMaterialized(t, d)
	e.pullAll(t, "u1", "c1", 1000, rep)
	e.requireConverged(t, rep, scope)
}

// A pruning batch that dies before it commits (its backend terminated while it
// waits for a lock held by another session) leaves the horizon and the
// history as they were; the next batch prunes, and a cursor at the old
// horizon still resumes exactly.
func TestHistoryPruneBatchKilledMidwayLosesNothing(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	const scope = "user:u1"
	d := e.d
	ctx := context.Background()
	d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('a', 'u1', 'a1')`)
	waitMaterialized(t, d)
	e.connect(t, "u1", "c1")
	rep := newReplica()
	e.rebuildScope(t, "u1", "c1", scope, 1000, rep)
	d.Exec(t, `UPDATE app.docs SET title = 'a2' WHERE id = 'a'`)
	waitMaterialized(t, d)
	e.pullAll(t, "u1", "c1", 1000, rep)
	before := queryInt(t, d, `SELECT (SELECT count(*) FROM synchro.effect) + (SELECT count(*) FROM synchro.row_version)
		+ (SELECT count(*) FROM synchro.scope_digest) + (SELECT count(*) FROM synchro.membership)`)

	// Another session holds a row the batch deletes (sessions of their own:
	// the test pool is small).
	holder := ownConn(t, d)
	if _, err := holder.Exec(ctx, `BEGIN; SELECT FROM synchro.effect FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	pruner := ownConn(t, d)
	var pid int64
	if err := pruner.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := pruner.Exec(ctx, `SELECT synchro.prune_history('0', 1000, now())`)
		done <- err
	}()
	waitFor(t, "the pruning batch waits for the lock", 10*time.Second, func() (bool, error) {
		var waiting bool
		err := d.Pool.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		return waiting, err
	})
	d.Exec(t, `SELECT pg_terminate_backend($1)`, pid)
	if err := <-done; err == nil {
		t.Fatal("the terminated pruning batch succeeded")
	}
	// Its backend holds the pruning lock until it is gone.
	waitFor(t, "the terminated backend gone", 10*time.Second, func() (bool, error) {
		var gone bool
		err := d.Pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&gone)
		return gone, err
	})
	if _, err := holder.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if got := horizon(t, d); got != "0/0" {
		t.Fatalf("a batch that did not commit moved the horizon to %s", got)
	}
	if after := queryInt(t, d, `SELECT (SELECT count(*) FROM synchro.effect) + (SELECT count(*) FROM synchro.row_version)
		+ (SELECT count(*) FROM synchro.scope_digest) + (SELECT count(*) FROM synchro.membership)`); after != before {
		t.Fatalf("a batch that did not commit removed %d rows", before-after)
	}

	// The lock wait is bounded (lock_timeout) when nobody kills the batch.
	if _, err := holder.Exec(ctx, `BEGIN; SELECT FROM synchro.effect FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if err := d.ExecErr(`SELECT synchro.prune_history('0', 1000, now())`); sqlState(err) != "55P03" {
		t.Fatalf("a batch waiting for a lock: %v, want lock_not_available", err)
	}
	if _, err := holder.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}

	// The cursor the client holds is at the last materialized commit: pruning
	// up to there keeps it resumable.
	pruneHistoryTo(t, d, queryText(t, d, `SELECT materialized_commit_lsn::text FROM synchro.progress`))
	d.Exec(t, `UPDATE app.docs SET title = 'a3' WHERE id = 'a'`)
	waitMaterialized(t, d)
	e.pullAll(t, "u1", "c1", 1000, rep)
	e.requireConverged(t, rep, scope)
	requireDigests(t, d)
}

// The worker moves the horizon by itself (PullHistoryRetention): with a tiny
// retention it reaches the materialized position, and nothing at or before it
// is left of the effects; a client resumes from a cursor at that position.
func TestWorkerAdvancesHistoryHorizon(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	d := e.d
	if err := e.w.stop(t); err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.PullHistoryRetention, cfg.PruneInterval = time.Microsecond, 20*time.Millisecond
	startWorker(t, d, cfg)
	d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('a', 'u1', 'a1')`)
	d.Exec(t, `UPDATE app.docs SET title = 'a2' WHERE id = 'a'`)
	waitMaterialized(t, d)
	hw := queryText(t, d, `SELECT materialized_commit_lsn::text FROM synchro.progress`)
	waitFor(t, "the worker's horizon at the materialized position", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(),
			`SELECT synchro.history_horizon_lsn(stream_generation) >= $1::pg_lsn FROM synchro.progress`, hw).Scan(&ok)
		return ok, err
	})
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.effect WHERE commit_lsn <= $1::pg_lsn`, hw); n != 0 {
		t.Fatalf("%d effects at or before the horizon left", n)
	}
	requireDigests(t, d)
	e.connect(t, "u1", "c1")
	rep := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 1000, rep)
	e.requireConverged(t, rep, "user:u1")
}

// Pruning the pull history never turns a replay into new work (the change
// stream's rule that a durable replay identity yields the same result and no
// duplicate versions, edges or effects): a transaction materialized but not
// acknowledged (the worker dies before the slot advance) is pruned behind the
// horizon, and the restarted worker, which receives it again, recognizes it
// by its transaction record and writes nothing; the horizon stays where it was.
func TestHistoryPrunedReplayWritesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "replay")
	w := startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'a'), (2, 'b')`)
	waitMaterialized(t, d)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	b := commitTxn(t, d, `UPDATE app.docs SET v = 'bb' WHERE id = 2`)
	crashCfg := cfg
	crashCfg.AfterStep = func(s wal.Step) error {
		if s == wal.StepMaterialized {
			return errors.New("simulated crash")
		}
		return nil
	}
	crashed := startWorker(t, d, crashCfg)
	if err := crashed.waitExit(t, 30*time.Second); !errors.Is(err, wal.ErrStopped) {
		t.Fatalf("worker did not stop at the hook: %v", err)
	}
	requireMaterializedOnce(t, d, 1, b)
	commitLSN, _, _, _ := ledgerOf(t, d, b)
	pruneHistoryTo(t, d, commitLSN)
	derived := `SELECT (SELECT count(*) FROM synchro.effect) || '/' || (SELECT count(*) FROM synchro.row_version)
		|| '/' || (SELECT count(*) FROM synchro.membership) || '/' || (SELECT count(*) FROM synchro.scope_digest)`
	before := queryText(t, d, derived)

	startWorker(t, d, cfg)
	waitAcknowledged(t, d)
	requireMaterializedOnce(t, d, 1, b)
	if after := queryText(t, d, derived); after != before {
		t.Fatalf("the replay of a pruned transaction wrote derived rows (effects/versions/edges/digests): %s, before %s", after, before)
	}
	if got := horizon(t, d); got != commitLSN {
		t.Fatalf("horizon %s after the replay, want %s", got, commitLSN)
	}
	requireDigests(t, d)
}
