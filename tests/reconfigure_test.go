package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// waitChangeActivated waits until the capture worker activated registry
// change id (synchro.activate_bootstrap).
func waitChangeActivated(t *testing.T, d *testdb.DB, id string) {
	t.Helper()
	waitFor(t, "registry change "+id+" activated", 60*time.Second, func() (bool, error) {
		var phase string
		err := d.Pool.QueryRow(context.Background(), `SELECT phase FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id).Scan(&phase)
		return phase == "activated" || phase == "retired", err
	})
}

// itemsOf is what user u should see of app.items: "id=title" of the rows the
// SQL condition where (over i) gives the user.
func itemsOf(t *testing.T, d *testdb.DB, where string, u string) []string {
	t.Helper()
	return rowsOf(t, d, `SELECT i.id || '=' || coalesce(i.title, '') FROM app.items i WHERE `+where, u)
}

// TestReconfigureTable walks a registration's life after it is served: a
// column added with a default reaches every client with the values existing
// rows hold (its projection is bootstrapped while a writer keeps changing
// rows; a client with the old schema is told rebuild_local); a rule change
// (owner_id to editor_id) moves rows between scopes, activated in source order
// with nothing to stage; unregistering takes the table out of the manifest and
// every scope, its triggers go, and a TRUNCATE of it afterwards blocks nothing.
func TestReconfigureTable(t *testing.T) {
	t.Parallel()
	const rows = 2000
	e := newSyncEnv(t, "")
	dropResetSlots(t, e)
	createItems(t, e.d, rows)
	e.d.Exec(t, `ALTER TABLE app.items ADD COLUMN editor_id text;
		UPDATE app.items SET editor_id = 'u' || (substr(id, 3)::int % 7 + 1);
		SELECT synchro.register_table('app.items', '{"kind":"column","template":"user:{owner_id}"}')`)
	bootstrapNow(t, e.d)
	waitCaptureReady(t, e.d)
	conn := e.connect(t, "u1", "c1")
	oldHash := conn["schema"].(map[string]any)["hash"].(string)
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 500, r)
	requireScopeTable(t, r, "user:u1", "items", itemsOf(t, e.d, `i.owner_id = $1`, "u1"))

	// A column added with a default: bootstrapped, served with its values.
	e.d.Exec(t, `ALTER TABLE app.items ADD COLUMN rank integer NOT NULL DEFAULT 7`)
	w := startItemsWriter(t, e.d, rows)
	id := queryText(t, e.d, `SELECT synchro.reconfigure_table('app.items', '{"kind":"column","template":"user:{owner_id}"}')::text`)
	if n := queryInt(t, e.d, `SELECT cardinality(relation_ids) FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id); n != 1 {
		t.Fatalf("the added column's reconfiguration stages %d relations, want the table's", n)
	}
	// Still served, under its old definition, until activation.
	if got := queryText(t, e.d, `SELECT synchro.schema_manifest()::text`); strings.Contains(got, `"rank"`) {
		t.Fatal("the manifest has the added column before the reconfiguration is activated")
	}
	bootstrapNow(t, e.d)
	w.stop(t)
	waitMaterialized(t, e.d)
	conn = requireOK(t, "connect", e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3,
		"schema": map[string]any{"hash": oldHash}, "known_scopes": map[string]any{"user:u1": map[string]any{"cursor": r.cursors["user:u1"]}}}))
	if a := conn["schema"].(map[string]any)["action"]; a != "rebuild_local" {
		t.Fatalf("schema action %v for a client with the old schema, want rebuild_local", a)
	}
	r = newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 500, r)
	requireScopeTable(t, r, "user:u1", "items", itemsOf(t, e.d, `i.owner_id = $1`, "u1"))
	e.requireConverged(t, r, "user:u1")
	for k, row := range r.rows["user:u1"] {
		if strings.HasPrefix(k, "items/") && row.Row["rank"] != float64(7) {
			t.Fatalf("row %s has rank %v, want the default 7", k, row.Row["rank"])
		}
	}

	// A rule change: rows move from owners' scopes to editors' scopes.
	id = queryText(t, e.d, `SELECT synchro.reconfigure_table('app.items', '{"kind":"column","template":"user:{editor_id}"}')::text`)
	waitChangeActivated(t, e.d, id)
	waitMaterialized(t, e.d)
	body := requireOK(t, "pull after the rule change", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1",
		"scopes": map[string]any{"user:u1": map[string]any{"cursor": r.cursors["user:u1"]}}, "limit": 100}))
	if got := mustMarshal(t, body["rebuild"]); got != `["user:u1"]` {
		t.Fatalf("rebuild %s after the rule change, want [\"user:u1\"]", got)
	}
	for _, u := range []string{"u1", "u3"} {
		e.connect(t, u, "e-"+u)
		re := newReplica()
		e.rebuildScope(t, u, "e-"+u, "user:"+u, 500, re)
		requireScopeTable(t, re, "user:"+u, "items", itemsOf(t, e.d, `i.editor_id = $1`, u))
		e.requireConverged(t, re, "user:"+u)
		// The first write after activation follows the new rule.
		e.d.Exec(t, `UPDATE app.items SET editor_id = $1, title = 'moved' WHERE id = 'i-1'`, u)
		waitMaterialized(t, e.d)
		e.pullAll(t, u, "e-"+u, 100, re)
		requireScopeTable(t, re, "user:"+u, "items", itemsOf(t, e.d, `i.editor_id = $1`, u))
	}

	// Unregistration: out of the manifest and every scope; no triggers; a
	// TRUNCATE afterwards blocks nothing.
	id = queryText(t, e.d, `SELECT synchro.unregister_table('app.items')::text`)
	waitChangeActivated(t, e.d, id)
	waitMaterialized(t, e.d)
	if got := queryText(t, e.d, `SELECT synchro.schema_manifest()::text`); strings.Contains(got, `"items"`) {
		t.Fatal("the unregistered table is still in the manifest")
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'app.items'::regclass AND tgname LIKE 'synchro%'`); n != 0 {
		t.Fatalf("%d Synchro triggers left on the unregistered table", n)
	}
	e.d.Exec(t, `TRUNCATE app.items`)
	e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('after-unregister', 'u1', 'x')`)
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)
	e.connect(t, "u3", "x-u3")
	re := newReplica()
	e.rebuildScope(t, "u3", "x-u3", "user:u3", 500, re)
	requireScopeTable(t, re, "user:u3", "items", nil)
	e.requireConverged(t, re, "user:u3")
	// The table can be registered again.
	e.d.Exec(t, `INSERT INTO app.items (id, owner_id, title) VALUES ('again', 'u3', 'again');
		SELECT synchro.register_table('app.items', '{"kind":"column","template":"user:{owner_id}"}')`)
	bootstrapNow(t, e.d)
	waitMaterialized(t, e.d)
	e.connect(t, "u3", "x-u3")
	re = newReplica()
	e.rebuildScope(t, "u3", "x-u3", "user:u3", 500, re)
	requireScopeTable(t, re, "user:u3", "items", []string{"again=again"})
}
