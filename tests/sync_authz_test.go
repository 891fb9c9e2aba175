package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// sharedDocsSchema is the shape of issue 28's first finding: shared_docs are
// read by a members rule over doc_members, a synced table whose own rule is
// user:{user_id} (so any user may push a membership row naming themselves).
// A new doc is inserted in no scope, then its first membership in the same
// push gives it one. A user may not write a membership row naming another, so
// sharing goes through granted_docs, read by a members rule over doc_grants,
// whose rows are their granter's.
const sharedDocsSchema = `
CREATE TABLE app.granted_docs (id text PRIMARY KEY, title text);
CREATE TABLE app.doc_grants (id text PRIMARY KEY, doc_id text NOT NULL REFERENCES app.granted_docs, user_id text NOT NULL, granted_by text NOT NULL);
SELECT synchro.register_table('app.doc_grants', '{"kind":"column","template":"user:{granted_by}"}');
SELECT synchro.register_table('app.granted_docs', '{"kind":"members","relation":"app.doc_grants","column":"doc_id","template":"user:{user_id}"}');
INSERT INTO app.granted_docs (id, title) VALUES ('docG', 'alice''s');
INSERT INTO app.doc_grants (id, doc_id, user_id, granted_by) VALUES ('gA', 'docG', 'alice', 'alice');
CREATE TABLE app.shared_docs (id text PRIMARY KEY, title text);
CREATE TABLE app.doc_members (id text PRIMARY KEY, doc_id text NOT NULL REFERENCES app.shared_docs, user_id text NOT NULL);
SELECT synchro.register_table('app.doc_members', '{"kind":"column","template":"user:{user_id}"}');
SELECT synchro.register_table('app.shared_docs', '{"kind":"members","relation":"app.doc_members","column":"doc_id","template":"user:{user_id}"}');
INSERT INTO app.shared_docs (id, title) VALUES ('docA', 'alice''s');
INSERT INTO app.doc_members (id, doc_id, user_id) VALUES ('mA', 'docA', 'alice');
`

// requireOutcome fails unless mutation id of resp has the code want ("" for
// accepted).
func requireOutcome(t *testing.T, resp map[string]any, id, want string) {
	t.Helper()
	list, o := outcome(t, resp, id)
	if want == "" && list != "accepted" || want != "" && o["code"] != want {
		t.Fatalf("mutation %s: want %q, got %s %v", id, want, list, o)
	}
}

// TestSyncPushJoinForeignRow (issue 28, finding 1): a push whose effect adds a
// scope to a row the pushing user could not write before is refused
// policy_rejected. Bob inserting a membership row that names himself on
// Alice's doc would make the doc his. Sharing a doc the user may write, and
// creating a doc with its first membership in one push, stay allowed; a row
// the same push created counts as the pusher's.
func TestSyncPushJoinForeignRow(t *testing.T) {
	e := newSyncEnv(t, sharedDocsSchema)
	e.connect(t, "alice", "ca")
	e.connect(t, "bob", "cb")

	// The attack: Bob joins Alice's doc.
	resp := e.push(t, "bob", "cb", mut("b1", "doc_members", "insert", map[string]any{"id": "mB"},
		map[string]any{"doc_id": "docA", "user_id": "bob"}))
	requireOutcome(t, resp, "b1", "policy_rejected")
	// Nor by moving a membership row of his own onto it.
	resp = e.push(t, "bob", "cb", mut("b2a", "shared_docs", "insert", map[string]any{"id": "docB"}, map[string]any{"title": "bob's"}),
		mut("b2", "doc_members", "insert", map[string]any{"id": "mB2"},
			map[string]any{"doc_id": "docB", "user_id": "bob"}),
		mut("b3", "doc_members", "update", map[string]any{"id": "mB2"}, map[string]any{"doc_id": "docA"}))
	requireOutcome(t, resp, "b2a", "")
	requireOutcome(t, resp, "b2", "")
	requireOutcome(t, resp, "b3", "policy_rejected")
	if n := queryText(t, e.d, `SELECT count(*) FROM app.doc_members WHERE doc_id = 'docA' AND user_id = 'bob'`); n != "0" {
		t.Fatalf("bob joined docA: %s memberships", n)
	}
	resp = e.push(t, "bob", "cb", mut("b4", "shared_docs", "update", map[string]any{"id": "docA"}, map[string]any{"title": "bob's"}))
	if list, _ := outcome(t, resp, "b4"); list != "rejected" {
		t.Fatalf("bob updated docA: %v", resp)
	}

	// The same through a grant row of Bob's own.
	resp = e.push(t, "bob", "cb", mut("b5", "doc_grants", "insert", map[string]any{"id": "gB"},
		map[string]any{"doc_id": "docG", "user_id": "bob", "granted_by": "bob"}))
	requireOutcome(t, resp, "b5", "policy_rejected")

	// Sharing: Alice may write docG and grants it to Bob; Bob may then write it.
	resp = e.push(t, "alice", "ca", mut("a1", "doc_grants", "insert", map[string]any{"id": "gAB"},
		map[string]any{"doc_id": "docG", "user_id": "bob", "granted_by": "alice"}))
	requireOutcome(t, resp, "a1", "")
	resp = e.push(t, "bob", "cb", mut("b5b", "granted_docs", "update", map[string]any{"id": "docG"}, map[string]any{"title": "shared"}))
	requireOutcome(t, resp, "b5b", "")

	// A new doc and its first membership in one push: the doc is created in
	// no scope, its membership gives it Alice's, and she may then write it.
	resp = e.push(t, "alice", "ca",
		mut("a3", "shared_docs", "insert", map[string]any{"id": "docN"}, map[string]any{"title": "new"}),
		mut("a2", "doc_members", "insert", map[string]any{"id": "mN"}, map[string]any{"doc_id": "docN", "user_id": "alice"}),
		mut("a4", "shared_docs", "update", map[string]any{"id": "docN"}, map[string]any{"title": "renamed"}))
	for _, id := range []string{"a2", "a3", "a4"} {
		requireOutcome(t, resp, id, "")
	}
	// A doc created in no scope by one push cannot be joined by a later one,
	// not even by its creator: nobody could write it before.
	resp = e.push(t, "alice", "ca", mut("a8", "shared_docs", "insert", map[string]any{"id": "docO"}, map[string]any{"title": "orphan"}))
	requireOutcome(t, resp, "a8", "")
	resp = e.push(t, "alice", "ca", mut("a9", "doc_members", "insert", map[string]any{"id": "mO"},
		map[string]any{"doc_id": "docO", "user_id": "alice"}))
	requireOutcome(t, resp, "a9", "policy_rejected")

	// A policy that lets a doc be created in no scope: the push that created
	// it may give it its first member; another push may not.
	e.d.Exec(t, `CREATE FUNCTION app.docs_create(user_id text, op text, table_name text, before jsonb, after jsonb)
		RETURNS boolean LANGUAGE sql AS $$ SELECT op = 'insert' $$;
		SELECT synchro.set_write_policy('app.shared_docs', 'app.docs_create(text,text,text,jsonb,jsonb)')`)
	resp = e.push(t, "alice", "ca",
		mut("a5", "shared_docs", "insert", map[string]any{"id": "docP"}, map[string]any{"title": "first"}),
		mut("a6", "doc_members", "insert", map[string]any{"id": "mP"}, map[string]any{"doc_id": "docP", "user_id": "alice"}),
		mut("a7", "shared_docs", "insert", map[string]any{"id": "docQ"}, map[string]any{"title": "orphan"}))
	for _, id := range []string{"a5", "a6", "a7"} {
		requireOutcome(t, resp, id, "")
	}
	resp = e.push(t, "bob", "cb", mut("b6", "doc_members", "insert", map[string]any{"id": "mQ"},
		map[string]any{"doc_id": "docQ", "user_id": "bob"}))
	requireOutcome(t, resp, "b6", "policy_rejected")
}

// TestSyncPushAdoptOrphan (issue 28, finding 2): a path step without a foreign
// key leaves an item whose folder was deleted in no scope; a user inserting a
// folder of that key would adopt it. The item would gain a scope its adopter
// could not write: refused policy_rejected.
func TestSyncPushAdoptOrphan(t *testing.T) {
	e := newSyncEnv(t, `
CREATE TABLE app.folders (id text PRIMARY KEY, owner_id text NOT NULL);
CREATE TABLE app.items (id text PRIMARY KEY, folder_id text, title text);
SELECT synchro.register_table('app.folders', '{"kind":"column","template":"user:{owner_id}"}');
SELECT synchro.register_table('app.items', '{"kind":"path","path":[{"column":"folder_id","references":"app.folders"}],"template":"user:{owner_id}"}');
INSERT INTO app.folders (id, owner_id) VALUES ('fA', 'alice');
INSERT INTO app.items (id, folder_id, title) VALUES ('iA', 'fA', 'alice''s item');
DELETE FROM app.folders WHERE id = 'fA';`)
	e.connect(t, "bob", "cb")
	resp := e.push(t, "bob", "cb", mut("b1", "folders", "insert", map[string]any{"id": "fA"}, map[string]any{"owner_id": "bob"}))
	requireOutcome(t, resp, "b1", "policy_rejected")
	resp = e.push(t, "bob", "cb", mut("b2", "items", "update", map[string]any{"id": "iA"}, map[string]any{"title": "bob's"}))
	if list, _ := outcome(t, resp, "b2"); list != "rejected" {
		t.Fatalf("bob updated the orphan: %v", resp)
	}
	// A folder with no orphan under it is his to create, with items in it.
	resp = e.push(t, "bob", "cb",
		mut("b3", "folders", "insert", map[string]any{"id": "fB"}, map[string]any{"owner_id": "bob"}),
		mut("b4", "items", "insert", map[string]any{"id": "iB"}, map[string]any{"folder_id": "fB"}))
	requireOutcome(t, resp, "b3", "")
	requireOutcome(t, resp, "b4", "")
}

// TestSyncPushPolicyReadsLiveRows (issue 28, finding 8): the write policy of an
// sql rule reads the rows the push's transaction sees, never a projection
// capture has not brought up to date. With capture held back, deleting Bob's
// access row must refuse his next update of the report at once.
func TestSyncPushPolicyReadsLiveRows(t *testing.T) {
	e := newSyncEnv(t, `
CREATE TABLE app.team_reports (id text PRIMARY KEY, report_id text NOT NULL, user_id text NOT NULL);
CREATE TABLE app.reports (id text PRIMARY KEY, title text);
SELECT synchro.register_dependency('app.team_reports');
SELECT synchro.register_table('app.reports', $${"kind":"sql",
  "membership":"SELECT 'user:' || (a.image->>'user_id') FROM synchro.projected('app.team_reports') a WHERE a.image->>'report_id' = $1->>'id'",
  "impacts":{"app.team_reports":"SELECT $1->>'report_id'"}}$$);
INSERT INTO app.reports (id, title) VALUES ('r1', 'q1');
INSERT INTO app.team_reports (id, report_id, user_id) VALUES ('a1', 'r1', 'bob');`)
	e.connect(t, "bob", "cb")
	resp := e.push(t, "bob", "cb", mut("b1", "reports", "update", map[string]any{"id": "r1"}, map[string]any{"title": "q2"}))
	requireOutcome(t, resp, "b1", "")
	e.pauseCapture(t)
	e.d.Exec(t, `DELETE FROM app.team_reports WHERE id = 'a1'`)
	resp = e.push(t, "bob", "cb", mut("b2", "reports", "update", map[string]any{"id": "r1"}, map[string]any{"title": "q3"}))
	if list, o := outcome(t, resp, "b2"); list != "rejected" || o["server_row"] != nil {
		t.Fatalf("bob's update after losing access: %s %v", list, o)
	}
	if got := queryText(t, e.d, `SELECT title FROM app.reports WHERE id = 'r1'`); got != "q2" {
		t.Fatalf("title %q, want q2", got)
	}
}

// TestSyncRefusedMutationReleasesRowLock (issue 28, finding 4): the row lock a
// refused or conflicting mutation took is released at once, not held until its
// push commits. Bob's push refuses his update of Alice's row and conflicts on
// one of his own, then waits on a row the test holds: meanwhile Alice's update
// of her row is applied, and Bob's conflicting row can be locked at once.
func TestSyncRefusedMutationReleasesRowLock(t *testing.T) {
	// Bob's push waits for the held row longer than the test needs.
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('dA', 'alice', 'a'), ('dB', 'bob', 'b'), ('dH', 'bob', 'held')`,
		func(s *httpapi.Sync) { s.PushLockTimeout = 10 * time.Second })
	e.connect(t, "alice", "ca")
	e.connect(t, "bob", "cb")
	ctx := context.Background()
	holder, err := e.d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT FROM app.docs WHERE id = 'dH' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	bob := make(chan reply, 1)
	go func() {
		bob <- e.post(t, "bob", "/sync/push", map[string]any{"client_id": "cb", "mutations": []map[string]any{
			mut("b1", "docs", "update", map[string]any{"id": "dA"}, map[string]any{"title": "bob's"}),
			{"mutation_id": "b2", "table": "docs", "op": "update", "pk": map[string]any{"id": "dB"},
				"columns": map[string]any{"title": "x"}, "base_version": "not-the-version"},
			mut("b3", "docs", "update", map[string]any{"id": "dH"}, map[string]any{"title": "after"})}})
	}()
	waitFor(t, "bob's push waits on the held row", 30*time.Second, func() (bool, error) {
		var waiting bool
		err := e.d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%synchro.push%')`).Scan(&waiting)
		return waiting, err
	})
	// Neither row is locked any more (NOWAIT fails at once on a locked row).
	for _, id := range []string{"dA", "dB"} {
		probe, err := e.d.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = probe.Exec(ctx, `SELECT FROM app.docs WHERE id = $1 FOR UPDATE NOWAIT`, id)
		probe.Rollback(ctx)
		if err != nil {
			t.Fatalf("bob's refused mutation still locks %s: %v", id, err)
		}
	}
	resp := e.push(t, "alice", "ca", mut("a1", "docs", "update", map[string]any{"id": "dA"}, map[string]any{"title": "alice's"}))
	requireOutcome(t, resp, "a1", "")
	select {
	case r := <-bob:
		t.Fatalf("bob's push ended before the held row was released: %s", r.Raw)
	default:
	}
	holder.Rollback(ctx)
	resp = requireOK(t, "bob's push", <-bob)
	requireOutcome(t, resp, "b1", "version_conflict") // as a missing row (TestSyncPushKeyProbing)
	requireOutcome(t, resp, "b2", "version_conflict")
	requireOutcome(t, resp, "b3", "")
}

// TestSyncRefusalsStayOutOfServerLog (issue 28, finding 9): a client's refused
// requests (synchro.refuse) are answered but not written to the PostgreSQL
// server log, which a client could otherwise flood with ERROR lines and their
// context. Reads the log of the test cluster (scripts/with-cluster.sh writes it
// to server.log in the data directory) from before the requests.
func TestSyncRefusalsStayOutOfServerLog(t *testing.T) {
	e := newSyncEnv(t, "")
	e.connect(t, "alice", "ca")
	var offset int64
	if err := e.d.Pool.QueryRow(context.Background(), `SELECT (pg_stat_file('server.log')).size`).Scan(&offset); err != nil {
		t.Fatalf("the test cluster's server log: %v", err)
	}
	for i := 0; i < 3; i++ {
		r := e.post(t, "alice", "/sync/push", map[string]any{"client_id": "not-connected", "mutations": []any{}})
		requireError(t, "push of an unknown client", r, 409, "client_conflict")
		r = e.post(t, "bob", "/sync/push", map[string]any{"client_id": "ca", "mutations": []any{}})
		requireError(t, "push with another user's client", r, 409, "client_conflict")
	}
	// A genuine error is still logged, in the same way: the log is being read.
	e.d.ExecErr(`SELECT 1 / 0 AS refusal_log_marker`)
	var logged string
	waitFor(t, "the marker error in the server log", 30*time.Second, func() (bool, error) {
		err := e.d.Pool.QueryRow(context.Background(),
			`SELECT pg_read_file('server.log', $1, (pg_stat_file('server.log')).size - $1)`, offset).Scan(&logged)
		return strings.Contains(logged, "refusal_log_marker"), err
	})
	for _, msg := range []string{"client_id is not connected", "client_id is registered to another user"} {
		if strings.Contains(logged, msg) {
			t.Fatalf("the server logged a client refusal: %q", msg)
		}
	}
}

// TestSyncPushKeyProbing (issue 28, finding 9): an update or delete of a key in
// another user's scopes is answered exactly as one of a key that does not
// exist, so that probing tells nothing about keys outside the user's scopes.
func TestSyncPushKeyProbing(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('dA', 'alice', 'a')`)
	e.connect(t, "bob", "cb")
	answers := map[string]string{}
	for _, id := range []string{"dA", "dMissing"} {
		for _, op := range []string{"update", "delete"} {
			var cols map[string]any
			if op == "update" {
				cols = map[string]any{"title": "probe"}
			}
			m := mut(op+"-"+id, "docs", op, map[string]any{"id": id}, cols)
			m["base_version"] = "guess"
			resp := e.push(t, "bob", "cb", m)
			list, o := outcome(t, resp, op+"-"+id)
			delete(o, "mutation_id")
			delete(o, "pk")
			answers[op+" "+id] = list + " " + mustMarshal(t, o)
		}
	}
	for _, op := range []string{"update", "delete"} {
		if answers[op+" dA"] != answers[op+" dMissing"] {
			t.Fatalf("%s of another user's key: %s\nof a missing key: %s", op, answers[op+" dA"], answers[op+" dMissing"])
		}
	}
	if got := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'dA'`); got != "a" {
		t.Fatalf("title %q", got)
	}
}

// TestClientRetention (issue 28, finding 9): synchro.client and synchro.mutation
// have a retention (synchro.configure_client_retention). The worker retires a
// client not seen for it, with its recorded outcomes, and prunes outcomes older than it of clients
// still in use; a retired client is refused until it connects again, as a new
// client. Requests keep a client's last_seen_at fresh.
func TestClientRetention(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, syncSchema)
	cfg := workerConfig(d, "sync")
	cfg.PruneInterval = 20 * time.Millisecond
	startStreaming(t, d, cfg)
	d.Exec(t, `SELECT synchro.configure_client_retention('1 day')`)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	e := &syncEnv{d: d, cfg: cfg, url: serveSync(t, d)}
	waitCaptureReady(t, d)
	for _, c := range []string{"c-old", "c-new"} {
		e.connect(t, "alice", c)
		resp := e.push(t, "alice", c, mut(c+"-1", "docs", "insert", map[string]any{"id": c}, map[string]any{"owner_id": "alice"}),
			mut(c+"-2", "docs", "update", map[string]any{"id": c}, map[string]any{"title": "t"}))
		requireOutcome(t, resp, c+"-1", "")
	}
	// c-old was last seen (and pushed) two days ago; c-new pushed c-new-1 then.
	d.Exec(t, `UPDATE synchro.client SET last_seen_at = now() - interval '2 days' WHERE client_id = 'c-old';
		UPDATE synchro.mutation SET recorded_at = now() - interval '2 days' WHERE mutation_id IN ('c-old-1', 'c-old-2', 'c-new-1')`)
	waitFor(t, "the worker prunes", 30*time.Second, func() (bool, error) {
		return queryText(t, d, `SELECT count(*) FROM synchro.client WHERE client_id = 'c-old'`) == "0", nil
	})
	if got := rowsOf(t, d, `SELECT mutation_id FROM synchro.mutation ORDER BY 1`); mustMarshal(t, got) != `["c-new-2"]` {
		t.Fatalf("recorded mutations %v, want [c-new-2]", got)
	}
	r := e.post(t, "alice", "/sync/push", map[string]any{"client_id": "c-old", "mutations": []any{}})
	requireError(t, "push of a retired client", r, 409, "client_conflict")
	e.connect(t, "alice", "c-old")
	requireOutcome(t, e.push(t, "alice", "c-old", mut("c-old-3", "docs", "update", map[string]any{"id": "c-old"},
		map[string]any{"title": "back"})), "c-old-3", "")

	// A request of a client last seen long ago moves last_seen_at.
	d.Exec(t, `UPDATE synchro.client SET last_seen_at = now() - interval '2 days' WHERE client_id = 'c-new'`)
	requireOutcome(t, e.push(t, "alice", "c-new", mut("c-new-3", "docs", "update", map[string]any{"id": "c-new"},
		map[string]any{"title": "again"})), "c-new-3", "")
	if got := queryText(t, d, `SELECT (last_seen_at > now() - interval '1 minute')::text FROM synchro.client WHERE client_id = 'c-new'`); got != "true" {
		t.Fatalf("c-new's last_seen_at did not move: %s", got)
	}
}

// TestSmallUpdateOfLargeRowWAL (issue 28, finding 7): a one-word update of a
// row whose body holds 4 MB writes WAL in proportion to the word, not the
// body: the triggers of a registered table must not make PostgreSQL store the
// unchanged (TOASTed) value again (4.6 MB per update before).
// Capture is paused so that only the updates' own WAL is measured.
func TestSmallUpdateOfLargeRowWAL(t *testing.T) {
	const valueBytes = 4 << 20
	e := newSyncEnv(t, `
CREATE TABLE app.big_docs (id text PRIMARY KEY, owner_id text NOT NULL, title text, body text);
ALTER TABLE app.big_docs ALTER COLUMN body SET STORAGE EXTERNAL; -- out of line, uncompressed
SELECT synchro.register_table('app.big_docs', '{"kind":"column","template":"user:{owner_id}"}');
INSERT INTO app.big_docs SELECT 'b1', 'alice', 'w0', string_agg(md5(i::text), '') FROM generate_series(1, 131072) i;`)
	e.connect(t, "alice", "ca")
	e.pauseCapture(t)
	ctx := context.Background()
	conn, err := e.d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	lsn := func() string {
		var l string
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	walSince := func(from string) int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - $1::pg_lsn`, from).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const updates = 5
	from := lsn()
	for i := 1; i <= updates; i++ {
		if _, err := conn.Exec(ctx, `UPDATE app.big_docs SET title = $1 WHERE id = 'b1'`, fmt.Sprintf("d%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	direct := walSince(from) / updates
	from = lsn()
	for i := 1; i <= updates; i++ {
		id := fmt.Sprintf("p%d", i)
		requireOutcome(t, e.push(t, "alice", "ca", mut(id, "big_docs", "update", map[string]any{"id": "b1"},
			map[string]any{"title": id})), id, "")
	}
	pushed := walSince(from) / updates
	t.Logf("WAL per one-word update of a row with a %d-byte value: direct %d bytes, push %d bytes", valueBytes, direct, pushed)
	// A push also records its outcome (synchro.mutation), which leaves a row
	// this large out: a replay answers server_row_omitted.
	if direct > valueBytes/10 || pushed > valueBytes/10 {
		t.Fatalf("WAL per update: direct %d, push %d bytes; want both below a tenth of the %d-byte value",
			direct, pushed, valueBytes)
	}
	resp := e.push(t, "alice", "ca", mut("p5", "big_docs", "update", map[string]any{"id": "b1"}, map[string]any{"title": "p5"})) // a replay
	if _, o := outcome(t, resp, "p5"); o["server_row_omitted"] != true || o["server_row"] != nil || o["server_version"] == nil {
		t.Fatalf("replayed outcome of an update of a large row: %v, want server_row_omitted with the version", o)
	}
	if got := queryText(t, e.d, `SELECT octet_length(body)::text || ' ' || title FROM app.big_docs WHERE id = 'b1'`); got != fmt.Sprint(valueBytes)+" p5" {
		t.Fatalf("row after the updates: %s", got)
	}
}

// TestSyncPushJoinThroughSQLRule: the rule of TestSyncPushJoinForeignRow for a
// table with an sql rule reading a synced share table: a share naming oneself
// on another user's report is refused; its owner may share it, and whoever may
// write it may share it further.
func TestSyncPushJoinThroughSQLRule(t *testing.T) {
	e := newSyncEnv(t, `
CREATE TABLE app.reports (id text PRIMARY KEY, owner_id text NOT NULL, title text);
CREATE TABLE app.report_shares (id text PRIMARY KEY, report_id text NOT NULL, user_id text NOT NULL, shared_by text NOT NULL);
SELECT synchro.register_table('app.report_shares', '{"kind":"column","template":"user:{shared_by}"}');
SELECT synchro.register_table('app.reports', $${"kind":"sql",
  "membership":"SELECT 'user:' || ($1->>'owner_id') UNION ALL SELECT 'user:' || (s.image->>'user_id') FROM synchro.projected('app.report_shares') s WHERE s.image->>'report_id' = $1->>'id'",
  "impacts":{"app.report_shares":"SELECT $1->>'report_id'"}}$$);
INSERT INTO app.reports (id, owner_id, title) VALUES ('rA', 'alice', 'q1');`)
	for _, u := range []string{"alice", "bob", "carol"} {
		e.connect(t, u, "c-"+u)
	}
	share := func(id, user, by string) map[string]any {
		return mut(id, "report_shares", "insert", map[string]any{"id": id}, map[string]any{"report_id": "rA", "user_id": user, "shared_by": by})
	}
	requireOutcome(t, e.push(t, "bob", "c-bob", share("s1", "bob", "bob")), "s1", "policy_rejected")
	requireOutcome(t, e.push(t, "alice", "c-alice", share("s2", "bob", "alice")), "s2", "")
	requireOutcome(t, e.push(t, "bob", "c-bob", share("s3", "carol", "bob")), "s3", "")
	requireOutcome(t, e.push(t, "carol", "c-carol", mut("u1", "reports", "update", map[string]any{"id": "rA"},
		map[string]any{"title": "carol's"})), "u1", "")
}
