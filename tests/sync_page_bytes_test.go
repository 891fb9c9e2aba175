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
