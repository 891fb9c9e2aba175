package tests

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/httpapi"
)

// TestSyncLongestUserIDFitsItsScope (issue 28, point 9): the longest user id
// authentication accepts names a scope, user:<id>, within the limits of scope
// ids (the request identifier limit and synchro.max_scope_bytes), so that user
// can push, pull and rebuild its own rows.
func TestSyncLongestUserIDFitsItsScope(t *testing.T) {
	user := strings.Repeat("u", auth.MaxUserIDLen)
	scope := "user:" + user
	e := newSyncEnv(t, "")
	var maxScope int
	if err := e.d.Pool.QueryRow(context.Background(), `SELECT synchro.max_scope_bytes()`).Scan(&maxScope); err != nil {
		t.Fatal(err)
	}
	if len(scope) > httpapi.DefaultLimits.MaxIdentifierLen || len(scope) > maxScope {
		t.Fatalf("scope of the longest user id is %d bytes: over the identifier limit %d or max_scope_bytes %d",
			len(scope), httpapi.DefaultLimits.MaxIdentifierLen, maxScope)
	}
	e.connect(t, user, "c1")
	if list, o := outcome(t, e.push(t, user, "c1", mut("m1", "docs", "insert", map[string]any{"id": "d1"},
		map[string]any{"owner_id": user, "title": "mine"})), "m1"); list != "accepted" {
		t.Fatalf("push: %v", o)
	}
	r := e.post(t, user, "/sync/rebuild", map[string]any{"client_id": "c1", "scope": scope, "cursor": nil})
	records, _ := requireOK(t, "rebuild of the user's own scope", r)["records"].([]any)
	if len(records) != 1 {
		t.Fatalf("rebuild of %s: %d records, want 1", scope[:12], len(records))
	}
	r = e.post(t, user, "/sync/pull", map[string]any{"client_id": "c1", "scopes": map[string]any{scope: map[string]any{"cursor": nil}}})
	if r.Status != http.StatusOK {
		t.Fatalf("pull of the user's own scope: %d %s", r.Status, r.Raw)
	}
}
