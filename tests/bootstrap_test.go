package tests

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/reset"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// itemsWriter changes app.items in the background until stopped, as an
// application that keeps writing while its table is bootstrapped: each round
// inserts a row of u1's, updates an existing row's title and (every third)
// deletes one, each in a transaction of its own; a write that fails is tried
// again (through a PostgreSQL restart too).
type itemsWriter struct {
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	rounds   int
	err      error
}

func startItemsWriter(t *testing.T, d *testdb.DB, rows int) *itemsWriter {
	w := &itemsWriter{quit: make(chan struct{}), done: make(chan struct{})}
	exec := func(sql string, args ...any) error {
		for attempt := 0; ; attempt++ {
			_, err := d.Pool.Exec(context.Background(), sql, args...)
			if err == nil || attempt == 1000 {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	go func() {
		defer close(w.done)
		for i := 1; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			err := exec(`INSERT INTO app.items (id, owner_id, title) VALUES ($1, 'u1', $1) ON CONFLICT (id) DO NOTHING`,
				fmt.Sprintf("w-%05d", i))
			if err == nil {
				err = exec(`UPDATE app.items SET title = title || '+' WHERE id = $1`, fmt.Sprintf("i-%d", i*7%rows+1))
			}
			if err == nil && i%3 == 0 {
				err = exec(`DELETE FROM app.items WHERE id = $1`, fmt.Sprintf("i-%d", i*11%rows+1))
			}
			w.mu.Lock()
			w.rounds, w.err = i, err
			w.mu.Unlock()
			if err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // a writer's pace, not a synchronization
		}
	}()
	t.Cleanup(func() { w.stop(t) })
	return w
}

func (w *itemsWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rounds
}

func (w *itemsWriter) stop(t *testing.T) {
	t.Helper()
	w.stopOnce.Do(func() { close(w.quit) })
	<-w.done
	if w.err != nil {
		t.Fatalf("items writer: %v", w.err)
	}
}

// createItems creates app.items holding rows rows, owned by u1..u20 in turn.
func createItems(t *testing.T, d *testdb.DB, rows int) {
	t.Helper()
	d.Exec(t, fmt.Sprintf(`CREATE TABLE app.items (id text PRIMARY KEY, owner_id text NOT NULL, title text);
		INSERT INTO app.items SELECT 'i-' || g, 'u' || (g %% 20 + 1), 'item ' || g FROM generate_series(1, %d) g`, rows))
}

// bootstrapNow runs the bootstrap coordinator once (the worker of e activates
// the bootstrap) and fails unless it ends retired.
func bootstrapNow(t *testing.T, d *testdb.DB) reset.Result {
	t.Helper()
	cfg := resetConfig(d, false)
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	res, err := reset.Bootstrap(context.Background(), cfg)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if res.Phase != "retired" {
		t.Fatalf("bootstrap ended %q, want retired", res.Phase)
	}
	return res
}

// manifestTables is the table names of a connect answer's schema definition.
func manifestTables(t *testing.T, body map[string]any) []string {
	t.Helper()
	def, _ := body["schema_definition"].(map[string]any)
	var names []string
	for _, it := range def["tables"].([]any) {
		names = append(names, it.(map[string]any)["name"].(string))
	}
	sort.Strings(names)
	return names
}

// requireScopeTable fails unless the replica's rows of table in scope are
// exactly the rows query returns as "id=title", each once.
func requireScopeTable(t *testing.T, r *replica, scope, table string, want []string) {
	t.Helper()
	sort.Strings(want)
	var got []string
	prefix := table + `/{"id":`
	for k, row := range r.rows[scope] {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		id := strings.Trim(strings.TrimSuffix(strings.TrimPrefix(k, prefix), "}"), `"`)
		title, _ := row.Row["title"].(string)
		got = append(got, id+"="+title)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("scope %s holds %d rows of %s, the database %d", scope, len(got), table, len(want))
	}
}

// TestBootstrapPopulatedTable registers a table holding 100,000 rows while a
// writer keeps inserting, updating and deleting its rows: nothing of it is
// served before the bootstrap's activation (not in the manifest, pushes to it
// answered retry), the table of tables already served stays ready; after it
// the old cursor's scope is listed for rebuild, connect answers replace with
// the table in the manifest, and every client's rebuilt scope equals the
// database row for row with a matching checksum, every write made during the
// bootstrap there once; later writes flow incrementally.
func TestBootstrapPopulatedTable(t *testing.T) {
	t.Parallel()
	const rows = 100000
	e := newSyncEnv(t, "")
	dropResetSlots(t, e)
	before := e.connect(t, "u1", "c1")
	hash := before["schema"].(map[string]any)["hash"].(string)
	e.push(t, "u1", "c1", mut("m1", "docs", "insert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "one"}))
	waitMaterialized(t, e.d)
	old := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, old)

	createItems(t, e.d, rows)
	w := startItemsWriter(t, e.d, rows)
	e.d.Exec(t, `SELECT synchro.register_table('app.items', '{"kind":"column","template":"user:{owner_id}"}')`)
	waitFor(t, "writes after registration", 10*time.Second, func() (bool, error) { return w.count() >= 20, nil })

	// Pending: not served, pushes answered retry, the served tables ready.
	waitCaptureReady(t, e.d)
	if got := manifestTables(t, e.connect(t, "u2", "c2")); strings.Contains(strings.Join(got, ","), "items") {
		t.Fatalf("the manifest names %v before the bootstrap", got)
	}
	_, o := outcome(t, e.push(t, "u1", "c1", mut("m2", "items", "insert", map[string]any{"id": "p1"},
		map[string]any{"owner_id": "u1", "title": "pushed"})), "m2")
	if o["status"] != "retry" {
		t.Fatalf("a push to the pending table: %v, want retry", o)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.membership m JOIN synchro.synced_table s USING (table_id) WHERE s.name = 'items'`); n != 0 {
		t.Fatalf("%d memberships of the pending table before activation", n)
	}

	res := bootstrapNow(t, e.d)
	at := w.count()
	waitFor(t, "writes after activation", 10*time.Second, func() (bool, error) { return w.count() >= at+20, nil })
	w.stop(t)
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)
	if n := queryInt(t, e.d, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = (SELECT candidate_slot FROM synchro.stream_reset WHERE reset_id = $1)`, res.ResetID); n != 0 {
		t.Fatal("the bootstrap's candidate slot survives its retirement")
	}

	// The old cursor: rebuild, nothing else. Connect: replace, with the table.
	body := requireOK(t, "pull with a cursor from before the bootstrap", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1",
		"scopes": map[string]any{"user:u1": map[string]any{"cursor": old.cursors["user:u1"]}}, "limit": 100}))
	if got := mustMarshal(t, body["rebuild"]); got != `["user:u1"]` {
		t.Fatalf("rebuild %s, want [\"user:u1\"]", got)
	}
	conn := requireOK(t, "connect", e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3,
		"schema": map[string]any{"hash": hash}, "known_scopes": map[string]any{"user:u1": map[string]any{"cursor": old.cursors["user:u1"]}}}))
	if a := conn["schema"].(map[string]any)["action"]; a != "replace" {
		t.Fatalf("schema action %v, want replace", a)
	}
	if got := strings.Join(manifestTables(t, conn), ","); !strings.Contains(got, "items") {
		t.Fatalf("the manifest after activation names %s", got)
	}
	if got := mustMarshal(t, conn["rebuild"]); got != `["user:u1"]` {
		t.Fatalf("connect rebuild %s, want [\"user:u1\"]", got)
	}

	for _, u := range []string{"u1", "u7"} {
		e.connect(t, u, "r-"+u)
		r := newReplica()
		e.rebuildScope(t, u, "r-"+u, "user:"+u, 1000, r) // checks the final checksum
		requireScopeTable(t, r, "user:"+u, "items", rowsOf(t, e.d, `SELECT id || '=' || coalesce(title, '') FROM app.items WHERE owner_id = $1`, u))
		e.requireConverged(t, r, "user:"+u)
		if u != "u1" {
			continue
		}
		// Later writes flow incrementally, also to rows written before registration.
		e.d.Exec(t, `UPDATE app.items SET title = 'later' WHERE id IN ('i-20', 'w-00001'); DELETE FROM app.items WHERE id = 'i-40'`)
		waitMaterialized(t, e.d)
		e.pullAll(t, u, "r-"+u, 100, r)
		requireScopeTable(t, r, "user:u1", "items", rowsOf(t, e.d, `SELECT id || '=' || coalesce(title, '') FROM app.items WHERE owner_id = 'u1'`))
		e.requireConverged(t, r, "user:u1")
	}

	// A push to a row written before registration, with the version the
	// rebuild delivered, applies.
	v := queryText(t, e.d, `SELECT h.version FROM synchro.row_head h JOIN synchro.relation r USING (relation_id)
		WHERE r.relation_name = 'items' AND h.key = 'i-60'`)
	_, o = outcome(t, e.push(t, "u1", "r-u1", map[string]any{"mutation_id": "m3", "table": "items", "op": "update",
		"pk": map[string]any{"id": "i-60"}, "columns": map[string]any{"title": "pushed"}, "base_version": v}), "m3")
	if o["status"] != "applied" {
		t.Fatalf("a push with the bootstrapped version: %v", o)
	}
}
