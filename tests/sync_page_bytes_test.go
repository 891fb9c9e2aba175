package tests

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/httpapi"
)

// pageRowBytes is the JSON text, written compactly, of the rows of a pull or
// rebuild page (no more than the server counts: it counts jsonb's text, which
// has spaces after separators).
func pageRowBytes(t *testing.T, items []any) int {
	t.Helper()
	n := 0
	for _, it := range items {
		if row, ok := it.(map[string]any)["row"]; ok {
			b, err := json.Marshal(row)
			if err != nil {
				t.Fatal(err)
			}
			n += len(b)
		}
	}
	return n
}

// requireBoundedPages checks pages against the byte budget: every page has at
// least one item, a page of more than one item holds at most budget bytes of
// rows, and the rows needed more than one page.
func requireBoundedPages(t *testing.T, what string, pages [][]any, budget int) {
	t.Helper()
	if len(pages) < 2 {
		t.Fatalf("%s: %d page(s), want the rows split by their bytes", what, len(pages))
	}
	for i, items := range pages {
		if i < len(pages)-1 && len(items) == 0 {
			t.Fatalf("%s: page %d of %d is empty", what, i, len(pages))
		}
		if n := pageRowBytes(t, items); len(items) > 1 && n > budget {
			t.Fatalf("%s: page %d has %d rows of %d bytes, over the budget of %d", what, i, len(items), n, budget)
		}
	}
}

// TestSyncPagesBoundedByBytes reproduces issue 28, point 6: pull and rebuild
// pages were bounded by rows only, so a scope of large rows built one huge
// jsonb value (past PostgreSQL's limit: 500, retried by the SDK for good).
// Pages are now bounded by the bytes of their rows too, with at least one row
// each (a row larger than the budget is a page of its own), and rebuild and
// pull still converge with the right checksums.
func TestSyncPagesBoundedByBytes(t *testing.T) {
	const budget = 100_000
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title)
		SELECT 'd' || g, 'u1', repeat('x', 30000) FROM generate_series(1, 12) g
		UNION ALL SELECT 'huge', 'u1', repeat('y', 250000)`, func(s *httpapi.Sync) {
		s.MaxPageBytes = budget
	})
	e.connect(t, "u1", "c1")
	var pages [][]any
	var cursor any
	for {
		body := requireOK(t, "rebuild", e.post(t, "u1", "/sync/rebuild",
			map[string]any{"client_id": "c1", "scope": "user:u1", "cursor": cursor, "limit": 1000}))
		pages = append(pages, body["records"].([]any))
		if body["has_more"] == false {
			break
		}
		cursor = body["cursor"]
	}
	requireBoundedPages(t, "rebuild", pages, budget)
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 1000, r) // checks the final checksum

	e.d.Exec(t, `UPDATE app.docs SET title = repeat('z', 30000) WHERE owner_id = 'u1'`)
	waitMaterialized(t, e.d)
	_, bodies := e.pagingPull(t, "u1", "c1", 1000, r) // checks the checksums
	pages = nil
	for _, b := range bodies {
		pages = append(pages, b["changes"].([]any))
	}
	requireBoundedPages(t, "pull", pages, budget)
	e.requireConverged(t, r, "user:u1")
}

// TestSyncPushRefusesOversizedValue (issue 28, point 6): a mutation carrying a
// column value larger than the limit is rejected validation_failed and changes
// nothing, a replay alike; the other mutations of the push apply.
func TestSyncPushRefusesOversizedValue(t *testing.T) {
	e := newSyncEnv(t, "", func(s *httpapi.Sync) { s.MaxValueBytes = 1000 })
	e.connect(t, "u1", "c1")
	muts := []map[string]any{
		mut("big", "docs", "insert", map[string]any{"id": "d-big"}, map[string]any{"owner_id": "u1", "title": strings.Repeat("x", 2000)}),
		mut("small", "docs", "insert", map[string]any{"id": "d-small"}, map[string]any{"owner_id": "u1", "title": strings.Repeat("x", 900)}),
	}
	for _, round := range []string{"push", "replay"} {
		resp := e.push(t, "u1", "c1", muts...)
		if list, o := outcome(t, resp, "big"); list != "rejected" || o["code"] != "validation_failed" {
			t.Fatalf("%s: oversized value: %s %v", round, list, o)
		}
		if list, o := outcome(t, resp, "small"); list != "accepted" {
			t.Fatalf("%s: value within the limit: %s %v", round, list, o)
		}
	}
	if queryBool(t, e.d, `SELECT EXISTS (SELECT FROM app.docs WHERE id = 'd-big')`) {
		t.Fatal("the oversized mutation changed the table")
	}
	if queryBool(t, e.d, `SELECT EXISTS (SELECT FROM synchro.mutation WHERE mutation_id = 'big')`) {
		t.Fatal("the oversized mutation was recorded")
	}
}

// TestSyncPushAnswerBoundedByBytes reproduces issue 28, point 6: a push
// answered every applied mutation with the whole row, so 60 small updates of
// a row with a large value made an answer (and memory) of 60 such rows. The
// applied outcomes now carry rows up to the byte budget (always the first);
// the later ones say server_row_omitted, and the SDK converges by pull.
func TestSyncPushAnswerBoundedByBytes(t *testing.T) {
	const budget, updates = 100_000, 6
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', repeat('x', 60000))`, func(s *httpapi.Sync) {
		s.MaxPageBytes = budget
	})
	e.connect(t, "u1", "c1")
	var muts []map[string]any
	for i := range updates {
		muts = append(muts, mut(string(rune('a'+i)), "docs", "update", map[string]any{"id": "d1"}, map[string]any{"n": i}))
	}
	resp := e.push(t, "u1", "c1", muts...)
	rows, omitted := 0, 0
	for _, m := range muts {
		list, o := outcome(t, resp, m["mutation_id"].(string))
		if list != "accepted" || o["server_version"] == nil {
			t.Fatalf("update %s: %s %v", m["mutation_id"], list, o)
		}
		if _, ok := o["server_row"]; ok {
			rows++
		} else if o["server_row_omitted"] == true {
			omitted++
		}
	}
	if rows < 1 || rows+omitted != updates || rows*60000 > budget+60000 {
		t.Fatalf("%d outcomes with the row, %d omitted, want at least one with it and at most %d bytes of rows beyond the first", rows, omitted, budget)
	}
}

// TestClientPushAnswerWithoutRows: the SDK takes an applied outcome whose
// row the answer omitted (three updated rows of 60 kB, a budget of 100 kB):
// the row stays as pushed and a later edit of it is made on the applied
// version, so a change another writer made meanwhile conflicts instead of
// being overwritten; the replica converges by pull.
func TestClientPushAnswerWithoutRows(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) SELECT 'd' || g, 'u1', repeat('x', 60000) FROM generate_series(1, 3) g`, func(s *httpapi.Sync) {
		s.MaxPageBytes = 100_000
	})
	c := openClient(t, e, t.TempDir(), "u1", "c1")
	settle(t, e, c)
	c.exec(t, `UPDATE docs SET n = 1`)
	if rep := c.sync(t); rep.Pushed != 3 || rep.Rejected != 0 || rep.Pending != 0 {
		t.Fatalf("sync: %+v", rep)
	}
	e.d.Exec(t, `UPDATE app.docs SET title = 'theirs'`) // another writer
	c.exec(t, `UPDATE docs SET title = 'mine'`)
	if rep := c.sync(t); rep.Rejected != 3 {
		t.Fatalf("edits made on the pushed versions, after another writer's: %+v, want 3 conflicts", rep)
	}
	settle(t, e, c)
	if got := c.localString(t, `SELECT group_concat(id || '=' || title || '/' || n, ',') FROM (SELECT * FROM docs ORDER BY id)`); got != "d1=theirs/1,d2=theirs/1,d3=theirs/1" {
		t.Fatalf("replica rows %q, want the server's", got)
	}
	requireReplica(t, e, c)
}
