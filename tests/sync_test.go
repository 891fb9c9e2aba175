package tests

import (
	"net/http"
	"testing"
)

// TestSyncRoundTrip: connect, push into every rule kind, pull and rebuild; the
// replica converges to the server's scope contents, and a direct SQL write
// arrives through pull.
func TestSyncRoundTrip(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.projects VALUES ('p1', 'u1'); INSERT INTO app.templates VALUES (1, 'welcome')`)
	conn := e.connect(t, "u1", "c1")
	if conn["scope_set_version"] != float64(1) {
		t.Fatalf("scope_set_version %v", conn["scope_set_version"])
	}
	resp := e.push(t, "u1", "c1",
		mut("m1", "docs", "insert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "Plan", "n": 3,
			"data": "AQI=", "at": "2026-03-20T18:22:11.5Z", "meta": map[string]any{"a": []any{1, "x"}}}),
		mut("m2", "tasks", "insert", map[string]any{"id": 7}, map[string]any{"project_id": "p1", "title": "T"}),
	)
	for _, id := range []string{"m1", "m2"} {
		if list, o := outcome(t, resp, id); list != "accepted" {
			t.Fatalf("mutation %s: %v", id, o)
		}
	}
	_, o := outcome(t, resp, "m1")
	r := newReplica()
	for _, s := range []string{"user:u1", "templates_public"} {
		e.rebuildScope(t, "u1", "c1", s, 1, r)
		e.requireConverged(t, r, s)
	}
	got := r.rows["user:u1"][rowKey("docs", map[string]any{"id": "d1"})]
	if got.Version != o["server_version"] {
		t.Fatalf("pulled version %s, pushed %v", got.Version, o["server_version"])
	}
	if a, b := mustMarshal(t, got.Row), mustMarshal(t, o["server_row"]); a != b {
		t.Fatalf("pulled row %s differs from push's server_row %s", a, b)
	}
	e.d.Exec(t, `UPDATE app.docs SET title = 'direct' WHERE id = 'd1'; INSERT INTO app.templates VALUES (2, 'two')`)
	waitMaterialized(t, e.d)
	e.pullAll(t, "u1", "c1", 500, r)
	for _, s := range []string{"user:u1", "templates_public"} {
		e.requireConverged(t, r, s)
	}
	if r.rows["user:u1"][rowKey("docs", map[string]any{"id": "d1"})].Row["title"] != "direct" {
		t.Fatal("the direct write did not arrive")
	}
	requireError(t, "no token", e.post(t, "", "/sync/pull", map[string]any{"client_id": "c1"}), http.StatusUnauthorized, "auth_required")
}
