package tests

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Adversarial tests of the sync endpoints from the side of a hostile or buggy
// client and of an application schema a demanding app team would write:
// constraints checked at commit, a push racing a direct write of the same row.

// hostileOutcome fails unless mutation id of resp is in list with status and
// code (code "" for applied) and returns it.
func hostileOutcome(t *testing.T, resp map[string]any, id, list, status, code string) map[string]any {
	t.Helper()
	l, o := outcome(t, resp, id)
	got, _ := o["code"].(string)
	if l != list || o["status"] != status || got != code {
		t.Fatalf("mutation %s: %s %v, want %s %s %s", id, l, o, list, status, code)
	}
	return o
}

// TestSyncPushDeferredConstraints: an application table whose foreign key,
// unique constraint or constraint trigger is checked at commit (DEFERRABLE
// INITIALLY DEFERRED). A mutation that violates it is rejected on its own as
// validation_failed naming the constraint: it is a client's mistake, never a
// 500, and it never rolls back the other mutations of the push (each mutation
// is its own savepoint). Nothing of the rejected mutation is written or
// recorded as applied.
func TestSyncPushDeferredConstraints(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		CREATE TABLE app.folders (id text PRIMARY KEY, owner_id text NOT NULL);
		CREATE TABLE app.files (id text PRIMARY KEY, owner_id text NOT NULL,
			folder_id text CONSTRAINT files_folder_fk REFERENCES app.folders DEFERRABLE INITIALLY DEFERRED,
			title text CONSTRAINT files_title_key UNIQUE DEFERRABLE INITIALLY DEFERRED);
		CREATE FUNCTION app.no_secret() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.title = 'forbidden' THEN RAISE EXCEPTION 'title % is forbidden', NEW.title; END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER files_no_secret AFTER INSERT OR UPDATE ON app.files
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION app.no_secret();
		SELECT synchro.register_table('app.folders', '{"kind":"column","template":"user:{owner_id}"}');
		SELECT synchro.register_table('app.files', '{"kind":"column","template":"user:{owner_id}"}');
		INSERT INTO app.folders VALUES ('fo1', 'u1');
		INSERT INTO app.files (id, owner_id, folder_id, title) VALUES ('f0', 'u1', 'fo1', 'taken')`)
	waitCaptureReady(t, e.d)
	e.connect(t, "u1", "c1")

	ok := func(id, fileID string) map[string]any {
		return mut(id, "files", "insert", map[string]any{"id": fileID}, map[string]any{"owner_id": "u1", "folder_id": "fo1", "title": "t-" + fileID})
	}
	r := e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": []any{
		ok("a1", "f1"),
		mut("fk", "files", "insert", map[string]any{"id": "f2"}, map[string]any{"owner_id": "u1", "folder_id": "nowhere"}),
		ok("a2", "f3"),
		mut("uq", "files", "insert", map[string]any{"id": "f4"}, map[string]any{"owner_id": "u1", "title": "taken"}),
		mut("tg", "files", "update", map[string]any{"id": "f0"}, map[string]any{"title": "forbidden"}),
		ok("a3", "f5"),
	}})
	resp := requireOK(t, "push with deferred constraint violations", r)
	epRequireNoLeak(t, "push answer", r.Raw, "nowhere", "forbidden")
	for _, id := range []string{"a1", "a2", "a3"} {
		hostileOutcome(t, resp, id, "accepted", "applied", "")
	}
	if m := hostileOutcome(t, resp, "fk", "rejected", "rejected", "validation_failed")["message"]; m != `constraint "files_folder_fk" is violated` {
		t.Fatalf("fk: message %q", m)
	}
	if m := hostileOutcome(t, resp, "uq", "rejected", "rejected", "validation_failed")["message"]; m != `constraint "files_title_key" is violated` {
		t.Fatalf("uq: message %q", m)
	}
	hostileOutcome(t, resp, "tg", "rejected", "rejected", "validation_failed")
	if got := rowsOf(t, e.d, `SELECT concat_ws('|', id, folder_id, title) FROM app.files ORDER BY id`); mustMarshal(t, got) !=
		mustMarshal(t, []string{"f0|fo1|taken", "f1|fo1|t-f1", "f3|fo1|t-f3", "f5|fo1|t-f5"}) {
		t.Fatalf("files after the push: %v", got)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation WHERE client_id = 'c1' AND outcome ->> 'status' = 'applied'`); n != 3 {
		t.Fatalf("%d mutations recorded as applied, want 3", n)
	}
	// The recorded outcomes answer a replay; the rejected mutations wrote no fence.
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.fence WHERE client_id = 'c1' AND mutation_id IN ('fk', 'uq', 'tg')`); n != 0 {
		t.Fatalf("rejected mutations left %d fences", n)
	}
	// Within one mutation the constraint still sees the state after it: a file
	// in a folder the same push created earlier is applied.
	resp = e.push(t, "u1", "c1",
		mut("b1", "folders", "insert", map[string]any{"id": "fo2"}, map[string]any{"owner_id": "u1"}),
		mut("b2", "files", "insert", map[string]any{"id": "f6"}, map[string]any{"owner_id": "u1", "folder_id": "fo2"}))
	hostileOutcome(t, resp, "b1", "accepted", "applied", "")
	hostileOutcome(t, resp, "b2", "accepted", "applied", "")
}

// TestSyncPushRacingDirectInsert: a push that inserts or upserts a row while a
// direct writer's transaction inserts the same key. The push waits for that
// transaction; once it commits, the push's insert is a version_conflict with
// the committed row (never a validation_failed "constraint violated", which a
// client takes as its own mistake), or server_retryable; an upsert is applied
// as an update of the committed row, or server_retryable, and its retry is.
// Never do both writes start from no row: the row has the direct write's
// version and then, for the upsert, the push's.
func TestSyncPushRacingDirectInsert(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	e.connect(t, "u1", "c1")
	ctx := context.Background()
	for _, op := range []string{"insert", "upsert"} {
		t.Run(op, func(t *testing.T) {
			key := "race-" + op
			tx, err := e.d.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			if _, err := tx.Exec(ctx, `INSERT INTO app.docs (id, owner_id, title) VALUES ($1, 'u1', 'direct')`, key); err != nil {
				t.Fatal(err)
			}
			m := mut("m-"+op, "docs", op, map[string]any{"id": key}, map[string]any{"owner_id": "u1", "title": "pushed"})
			pushed := make(chan reply, 1)
			go func() {
				pushed <- e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": []any{m}})
			}()
			waitFor(t, "the push to wait for the direct insert", 30*time.Second, func() (bool, error) {
				return queryBool(t, e.d, `SELECT EXISTS (SELECT FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%synchro.push%')`), nil
			})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-pushed
			resp := requireOK(t, "push racing a direct insert", r)
			_, o := outcome(t, resp, m["mutation_id"].(string))
			if o["code"] == "server_retryable" {
				resp = e.push(t, "u1", "c1", m)
				_, o = outcome(t, resp, m["mutation_id"].(string))
			}
			title := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = $1`, key)
			switch op {
			case "insert":
				o = hostileOutcome(t, resp, "m-insert", "rejected", "conflict", "version_conflict")
				if row, _ := o["server_row"].(map[string]any); row["title"] != "direct" || title != "direct" {
					t.Fatalf("insert racing an insert: %v, row title %q", o, title)
				}
			case "upsert":
				o = hostileOutcome(t, resp, "m-upsert", "accepted", "applied", "")
				if row, _ := o["server_row"].(map[string]any); row["title"] != "pushed" || title != "pushed" {
					t.Fatalf("upsert racing an insert: %v, row title %q", o, title)
				}
			}
		})
	}
}

// TestSyncRefusesDuplicateMembers: a body with an object that names one member
// twice (also spelled differently: "ti\u0074le" is "title") is a 400
// invalid_request that changes nothing, at every level: request fields, a
// mutation's fields, pk, columns, a json column's value, the scope maps. JSON
// leaves such a body's meaning open (encoding/json and jsonb take the last
// value, other parsers the first): a proxy that checked the first
// base_version, owner_id or client_id must not see another one applied.
func TestSyncRefusesDuplicateMembers(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one'), ('b1', 'u2', 'theirs')`)
	e.connect(t, "u1", "c1")
	e.connect(t, "u1", "c2")
	cur := e.rebuildScope(t, "u1", "c1", "user:u1", 100, newReplica())["final_scope_cursor"].(string)
	push := func(m string) string { return `{"client_id":"c1","mutations":[` + m + `]}` }
	cases := []struct{ name, path, body string }{
		{"client_id twice", "/sync/pull", `{"client_id":"c2","client_id":"c1"}`},
		{"client_id twice, escaped", "/sync/push", `{"client_id":"c1","mutations":[],"client_\u0069d":"c2"}`},
		{"mutations twice", "/sync/push", `{"client_id":"c1","mutations":[],"mutations":[{"mutation_id":"x1","table":"docs","op":"delete","pk":{"id":"d1"}}]}`},
		{"base_version twice", "/sync/push", push(`{"mutation_id":"x2","table":"docs","op":"update","pk":{"id":"d1"},"base_version":"stale","base_version":null,"columns":{"title":"dup"}}`)},
		{"op twice", "/sync/push", push(`{"mutation_id":"x3","table":"docs","op":"update","op":"delete","pk":{"id":"d1"},"columns":{"title":"dup"}}`)},
		{"pk member twice", "/sync/push", push(`{"mutation_id":"x4","table":"docs","op":"delete","pk":{"id":"b1","id":"d1"}}`)},
		{"column twice", "/sync/push", push(`{"mutation_id":"x5","table":"docs","op":"insert","pk":{"id":"n1"},"columns":{"owner_id":"u2","owner_id":"u1"}}`)},
		{"column twice, escaped", "/sync/push", push(`{"mutation_id":"x6","table":"docs","op":"update","pk":{"id":"d1"},"columns":{"title":"dup","ti\u0074le":"dup2"}}`)},
		{"member twice in a json value", "/sync/push", push(`{"mutation_id":"x7","table":"docs","op":"update","pk":{"id":"d1"},"columns":{"meta":{"a":[{"k":1,"k":2}]}}}`)},
		{"scope twice", "/sync/pull", `{"client_id":"c1","scopes":{"user:u1":{"cursor":"` + cur + `"},"user:u1":{"cursor":null}}}`},
		{"cursor twice", "/sync/pull", `{"client_id":"c1","scopes":{"user:u1":{"cursor":null,"cursor":"` + cur + `"}}}`},
		{"known scope twice", "/sync/connect", `{"client_id":"c1","protocol_version":3,"known_scopes":{"user:u1":{"cursor":null},"user:u1":{"cursor":null}}}`},
		{"scope twice in rebuild", "/sync/rebuild", `{"client_id":"c1","scope":"user:u2","scope":"user:u1"}`},
		{"member twice in an ignored field", "/sync/pull", `{"client_id":"c1","extra":{"a":1,"a":1}}`},
	}
	for _, c := range cases {
		epRequireError(t, c.name, e.post(t, "u1", c.path, c.body), http.StatusBadRequest, "invalid_request", "dup", "stale")
	}
	if got := rowsOf(t, e.d, `SELECT concat_ws('|', id, owner_id, title, meta) FROM app.docs ORDER BY id`); mustMarshal(t, got) !=
		mustMarshal(t, []string{"b1|u2|theirs", "d1|u1|one"}) {
		t.Fatalf("refused pushes wrote: %v", got)
	}
	if n := queryInt(t, e.d, `SELECT (SELECT count(*) FROM synchro.mutation) + (SELECT count(*) FROM synchro.fence WHERE client_id IS NOT NULL)`); n != 0 {
		t.Fatalf("refused pushes recorded %d mutations and fences", n)
	}
	// Members of one name in different objects, and names that differ, are fine.
	resp := e.push(t, "u1", "c1", mut("ok", "docs", "update", map[string]any{"id": "d1"},
		map[string]any{"title": "t", "meta": map[string]any{"a": map[string]any{"title": 1}, "A": []any{map[string]any{"a": 1}, map[string]any{"a": 2}}}}))
	hostileOutcome(t, resp, "ok", "accepted", "applied", "")
}

// TestSyncPushLongScopeID: a table whose sql scope rule puts a row, beside its
// owner's scope, in a scope named after a column the client writes. A push
// (allowed by the default write policy: the row is in the user's scope) whose
// row would be in a scope id longer than synchro.max_scope_bytes() is rejected
// as validation_failed and writes nothing: materialized, that scope would not
// fit its membership index entry and would block capture for every client.
// A scope id of exactly the limit beside the longest key is captured.
func TestSyncPushLongScopeID(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		CREATE TABLE app.posts (id text PRIMARY KEY, owner_id text NOT NULL, tag text);
		SELECT synchro.register_table('app.posts', $${"kind":"sql",
			"membership":"SELECT 'user:' || ($1->>'owner_id') UNION ALL SELECT 'tag:' || ($1->>'tag') WHERE $1->>'tag' IS NOT NULL",
			"impacts":{}}$$)`)
	waitCaptureReady(t, e.d)
	e.connect(t, "u1", "c1")
	limit := int(queryInt(t, e.d, `SELECT synchro.max_scope_bytes()`))
	maxKey := int(queryInt(t, e.d, `SELECT synchro.max_key_bytes()`))
	// Incompressible text: a repeated character would fit the index compressed.
	longest := hostileNoise(maxKey)
	tag := hostileNoise(limit - len("tag:"))
	resp := e.push(t, "u1", "c1",
		mut("long", "posts", "insert", map[string]any{"id": "p1"}, map[string]any{"owner_id": "u1", "tag": tag + "x"}),
		mut("grow", "posts", "insert", map[string]any{"id": "p2"}, map[string]any{"owner_id": "u1", "tag": "short"}),
		mut("grow2", "posts", "update", map[string]any{"id": "p2"}, map[string]any{"tag": tag + "y"}),
		mut("fits", "posts", "insert", map[string]any{"id": longest}, map[string]any{"owner_id": "u1", "tag": tag}))
	for _, id := range []string{"long", "grow2"} {
		o := hostileOutcome(t, resp, id, "rejected", "rejected", "validation_failed")
		epRequireNoLeak(t, id, []byte(mustMarshal(t, o)), tag[:20])
	}
	hostileOutcome(t, resp, "grow", "accepted", "applied", "")
	hostileOutcome(t, resp, "fits", "accepted", "applied", "")
	if got := rowsOf(t, e.d, `SELECT id || '|' || length(tag) FROM app.posts ORDER BY length(id)`); mustMarshal(t, got) !=
		mustMarshal(t, []string{"p2|5", longest + "|" + strconv.Itoa(len(tag))}) {
		t.Fatalf("posts after the push: %v", got)
	}
	// Capture is not blocked: both rows reach the user's scope, the long key in
	// the scope of exactly the limit too.
	waitMaterialized(t, e.d)
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r)
	if len(r.rows["user:u1"]) != 2 {
		t.Fatalf("user:u1 holds %d rows, want 2", len(r.rows["user:u1"]))
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.membership WHERE scope = $1 AND to_lsn IS NULL`, "tag:"+tag); n != 1 {
		t.Fatalf("the scope of exactly the limit has %d open memberships, want 1", n)
	}
}

// hostileNoise is n bytes of incompressible text (base-36 digits of a
// xorshift sequence), the same for every call.
func hostileNoise(n int) string {
	var b strings.Builder
	x := uint64(88172645463325252)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b.WriteString(strconv.FormatUint(x, 36))
	}
	return b.String()[:n]
}
