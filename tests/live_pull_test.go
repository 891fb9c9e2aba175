package tests

// Live pull (docs/protocol.md, "Live pull"): a pull with wait_ms is held while
// nothing is new for its scopes and answered when materialization commits a
// change of one of them, at its deadline, or at shutdown.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/live"
	"github.com/synchro-sync/synchro/internal/reset"
)

// liveEnv is a sync environment whose server runs a live hub (stopped by
// stop, or at the end of the test) and lets pulls wait up to a minute.
type liveEnv struct {
	*syncEnv
	hub  *live.Hub
	pool *pgxpool.Pool
	stop context.CancelFunc
}

func newLiveEnv(t *testing.T) *liveEnv {
	t.Helper()
	l := &liveEnv{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.stop = cancel
	l.syncEnv = newSyncEnv(t, "", func(s *httpapi.Sync) {
		l.pool = s.Pool
		l.hub = live.NewHub(s.Pool, 1000, 16, slog.New(slog.NewTextHandler(io.Discard, nil)))
		s.Live, s.MaxPullWait = l.hub, time.Minute
		go l.hub.Run(ctx)
	})
	return l
}

// follow connects user's client c-<user> and rebuilds both of its scopes
// (user:<user> and templates_public) into a replica.
func (l *liveEnv) follow(t *testing.T, user string) *replica {
	t.Helper()
	l.connect(t, user, "c-"+user)
	r := newReplica()
	for _, scope := range []string{"user:" + user, "templates_public"} {
		l.rebuildScope(t, user, "c-"+user, scope, 100, r)
	}
	return r
}

// livePull sends a pull of user's scopes at cursors that may wait waitMs, on
// a goroutine; the reply arrives on the channel returned.
func (l *liveEnv) livePull(t *testing.T, user string, cursors map[string]any, waitMs int) <-chan reply {
	t.Helper()
	out := make(chan reply, 1)
	scopes := map[string]any{}
	for scope, c := range cursors {
		scopes[scope] = map[string]any{"cursor": c}
	}
	body := map[string]any{"client_id": "c-" + user, "scopes": scopes, "limit": 100, "wait_ms": waitMs}
	go func() { out <- l.post(t, user, "/sync/pull", body) }()
	return out
}

// cursorsOf is the scope cursors of a pull answer.
func cursorsOf(body map[string]any) map[string]any {
	return body["scope_cursors"].(map[string]any)
}

// waitWaiting waits until n pulls wait in the hub.
func (l *liveEnv) waitWaiting(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d waiting pulls", n), 30*time.Second, func() (bool, error) { return l.hub.Waiting() == n, nil })
}

// answered returns the reply of a live pull, failing after a deadline.
func answered(t *testing.T, what string, c <-chan reply) reply {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30 s", what)
		return reply{}
	}
}

// pending fails if the live pull c has answered.
func pending(t *testing.T, what string, c <-chan reply) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("%s: the waiting pull answered %d %s", what, r.Status, r.Raw)
	default:
	}
}

// changesOf is "table/op/pk" of each change of a pull answer.
func changesOf(body map[string]any) []string {
	var out []string
	for _, c := range body["changes"].([]any) {
		ch := c.(map[string]any)
		out = append(out, fmt.Sprintf("%v/%v/%v", ch["table"], ch["op"], ch["pk"].(map[string]any)["id"]))
	}
	return out
}

// TestLivePull: a waiting pull is answered when a change of its scope is
// materialized, not when another user's scope changes; at its deadline it
// answers nothing new with the cursor an immediate pull gives; the gate and a
// tampered cursor answer at once as for an ordinary pull; a scope assignment
// change and a shutdown answer waiting pulls.
func TestLivePull(t *testing.T) {
	t.Parallel()
	l := newLiveEnv(t)
	r1, r2 := l.follow(t, "u1"), l.follow(t, "u2")

	// A change of u2's scope answers u2's waiting pull and not u1's.
	p1 := l.livePull(t, "u1", r1.cursors, 60000)
	p2 := l.livePull(t, "u2", r2.cursors, 60000)
	l.waitWaiting(t, 2)
	l.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d-u2', 'u2', 'for u2')`)
	a2 := requireOK(t, "u2's waiting pull", answered(t, "u2's waiting pull", p2))
	if got := strings.Join(changesOf(a2), ","); got != "docs/upsert/d-u2" {
		t.Fatalf("u2's waiting pull answered %s", got)
	}
	l.waitWaiting(t, 1)
	pending(t, "u1 after a change of u2's scope", p1)
	l.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d-u1', 'u1', 'for u1')`)
	a1 := requireOK(t, "u1's waiting pull", answered(t, "u1's waiting pull", p1))
	if got := strings.Join(changesOf(a1), ","); got != "docs/upsert/d-u1" {
		t.Fatalf("u1's waiting pull answered %s", got)
	}
	cursors := cursorsOf(a1)

	// The deadline: nothing new, the cursor an immediate pull gives.
	empty := requireOK(t, "a pull at its deadline", answered(t, "a pull at its deadline", l.livePull(t, "u1", cursors, 200)))
	now := requireOK(t, "an immediate pull", answered(t, "an immediate pull", l.livePull(t, "u1", cursors, 0)))
	if len(changesOf(empty)) != 0 || mustMarshal(t, empty["rebuild"]) != "[]" ||
		mustMarshal(t, empty["scope_cursors"]) != mustMarshal(t, now["scope_cursors"]) {
		t.Fatalf("a pull at its deadline answered %s, an immediate one %s", mustMarshal(t, empty), mustMarshal(t, now))
	}

	// A tampered cursor answers at once, as for an ordinary pull: rebuild.
	cursor := cursors["user:u1"].(string)
	tampered := requireOK(t, "a waiting pull with a tampered cursor", answered(t, "a tampered cursor",
		l.livePull(t, "u1", map[string]any{"user:u1": cursor[:len(cursor)-2] + "xx", "templates_public": cursors["templates_public"]}, 60000)))
	if got := mustMarshal(t, tampered["rebuild"]); got != `["user:u1"]` {
		t.Fatalf("a tampered cursor answered rebuild %s", got)
	}
	// A bad wait_ms is refused.
	if r := l.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c-u1", "wait_ms": -1}); r.Status != 400 || r.errorCode() != "invalid_request" {
		t.Fatalf("wait_ms -1: %d %s", r.Status, r.Raw)
	}

	// A scope offered in scope_updates.add that the client leaves unrequested
	// is nothing new: the pull waits for a change.
	only := l.livePull(t, "u1", map[string]any{"user:u1": cursors["user:u1"]}, 60000)
	l.waitWaiting(t, 1)
	l.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d-u1b', 'u1', 'again')`)
	a := requireOK(t, "a waiting pull of one scope", answered(t, "a pull of one scope", only))
	if got := strings.Join(changesOf(a), ","); got != "docs/upsert/d-u1b" || !strings.Contains(mustMarshal(t, a["scope_updates"]), "templates_public") {
		t.Fatalf("a waiting pull of user:u1 alone answered %s", mustMarshal(t, a))
	}
	cursors["user:u1"] = cursorsOf(a)["user:u1"]

	// A scope assignment change answers a waiting pull with the change.
	p1 = l.livePull(t, "u1", cursors, 60000)
	l.waitWaiting(t, 1)
	l.d.Exec(t, `CREATE FUNCTION app.only_shared(user_id text) RETURNS SETOF text LANGUAGE sql STABLE AS $$ SELECT 'templates_public'::text $$;
		SELECT synchro.set_scope_assignment('app.only_shared(text)')`)
	moved := requireOK(t, "a waiting pull when its scope was unassigned", answered(t, "after the assignment change", p1))
	if got := mustMarshal(t, moved["scope_updates"]); !strings.Contains(got, `"remove":["user:u1"]`) {
		t.Fatalf("after its scope was unassigned a waiting pull answered scope_updates %s", got)
	}
	l.d.Exec(t, `SELECT synchro.set_scope_assignment(NULL)`)

	// The gate: a pull while capture is not ready answers 503 at once.
	l.pauseCapture(t)
	waitFor(t, "capture not ready", 30*time.Second, func() (bool, error) {
		return answered(t, "a pull", l.livePull(t, "u1", cursors, 0)).Status == 503, nil
	})
	if r := answered(t, "a waiting pull while not ready", l.livePull(t, "u1", cursors, 60000)); r.Status != 503 || r.errorCode() != "not_ready" {
		t.Fatalf("a waiting pull while capture is not ready: %d %s", r.Status, r.Raw)
	}
}

// TestLivePullHoldsNoConnection: 200 pulls of 200 users wait without holding a
// connection of the sync pool (nor opening any), then a transaction that
// changes every one of their scopes answers them all; a shutdown answers the
// ones waiting then.
func TestLivePullHoldsNoConnection(t *testing.T) {
	t.Parallel()
	l := newLiveEnv(t)
	const n = 200
	replies := make([]<-chan reply, n)
	for i := range n {
		u := fmt.Sprintf("w%03d", i)
		replies[i] = l.livePull(t, u, l.follow(t, u).cursors, 60000)
	}
	l.waitWaiting(t, n)
	if acquired := l.pool.Stat().AcquiredConns(); acquired != 0 {
		t.Fatalf("%d sync pool connections held by %d waiting pulls", acquired, n)
	}
	if got := queryInt(t, l.d, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`); got > 16+8 {
		t.Fatalf("%d connections to the database while %d pulls wait (sync pool 16)", got, n)
	}
	l.d.Exec(t, fmt.Sprintf(`INSERT INTO app.docs (id, owner_id, title) SELECT 'd-' || g, 'w' || lpad(g::text, 3, '0'), 'x' FROM generate_series(0, %d) g`, n-1))
	for i, c := range replies {
		a := requireOK(t, "a waiting pull", answered(t, fmt.Sprintf("pull %d", i), c))
		if got := strings.Join(changesOf(a), ","); got != fmt.Sprintf("docs/upsert/d-%d", i) {
			t.Fatalf("waiting pull %d answered %s", i, got)
		}
	}

	// Shutdown: a waiting pull answers nothing new.
	p := l.livePull(t, "w000", l.follow(t, "w000").cursors, 60000)
	l.waitWaiting(t, 1)
	l.stop()
	if a := requireOK(t, "a waiting pull at shutdown", answered(t, "at shutdown", p)); len(changesOf(a)) != 0 {
		t.Fatalf("a waiting pull at shutdown answered %s", mustMarshal(t, a))
	}
}

// TestClientLive: the SDK's Live mode applies a change committed in SQL while
// its live pull waits, and pushes a local write once poked; it ends with its
// context.
func TestClientLive(t *testing.T) {
	t.Parallel()
	l := newLiveEnv(t)
	c := openClient(t, l.syncEnv, t.TempDir(), "u1", "live-1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Live(ctx, 30*time.Second, nil) }()
	l.waitWaiting(t, 1)

	l.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d-sql', 'u1', 'from psql')`)
	waitFor(t, "the row written in SQL in the replica", 30*time.Second, func() (bool, error) {
		var n int
		err := c.DB().QueryRow(`SELECT count(*) FROM docs WHERE id = 'd-sql' AND title = 'from psql'`).Scan(&n)
		return n == 1, err
	})

	c.exec(t, `INSERT INTO docs (id, owner_id, title) VALUES ('d-local', 'u1', 'written offline')`)
	c.Poke()
	waitFor(t, "the local write on the server", 30*time.Second, func() (bool, error) {
		return queryInt(t, l.d, `SELECT count(*) FROM app.docs WHERE id = 'd-local'`) == 1, nil
	})

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Live ended with %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Live did not end with its context")
	}
}

// TestLivePullAcrossStreamReset: a pull waiting while a stream reset activates
// a new stream generation is woken by the activation and answers as an
// ordinary pull does then: 503 not_ready (retryable) until the worker streams
// the new generation, and every scope in rebuild with no change once it does.
func TestLivePullAcrossStreamReset(t *testing.T) {
	l := newLiveEnv(t)
	dropResetSlots(t, l.syncEnv)
	r := l.follow(t, "u1")
	oldGen := queryText(t, l.d, `SELECT stream_generation::text FROM synchro.progress`)
	p := l.livePull(t, "u1", r.cursors, 60000)
	l.waitWaiting(t, 1)

	res, err := reset.Run(context.Background(), resetConfig(l.d, true))
	if err != nil || res.Phase != "activated" {
		t.Fatalf("reset: %v (phase %s)", err, res.Phase)
	}
	woken := answered(t, "after the reset's activation", p)
	if gen := queryText(t, l.d, `SELECT stream_generation::text FROM synchro.progress`); gen == oldGen {
		t.Fatal("the stream generation did not change")
	}
	answers := map[string]reply{"the woken pull": woken}
	if woken.Status == 503 && woken.errorCode() == "not_ready" {
		answers = map[string]reply{}
	}
	// An ordinary pull, retried as clients do while it answers not_ready.
	var ordinary reply
	waitFor(t, "an ordinary pull past not_ready", 30*time.Second, func() (bool, error) {
		ordinary = l.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c-u1", "scopes": map[string]any{
			"user:u1": map[string]any{"cursor": r.cursors["user:u1"]}, "templates_public": map[string]any{"cursor": r.cursors["templates_public"]}},
			"limit": 100})
		return ordinary.Status != 503 || ordinary.errorCode() != "not_ready", nil
	})
	answers["an ordinary pull at the same cursors"] = ordinary
	for what, a := range answers {
		body := requireOK(t, what, a)
		if got := mustMarshal(t, body["rebuild"]); got != `["templates_public","user:u1"]` {
			t.Fatalf("%s answered rebuild %s, want both scopes", what, got)
		}
		if n := len(body["changes"].([]any)); n != 0 {
			t.Fatalf("%s answered %d changes across the reset", what, n)
		}
	}
}
