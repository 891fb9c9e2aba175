package tests

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/reset"
)

// waitCaptureBlocked waits until readiness is false: drift blocked capture.
func waitCaptureBlocked(t *testing.T, e *syncEnv) {
	t.Helper()
	waitFor(t, "capture blocked", 30*time.Second, func() (bool, error) {
		var ready bool
		err := e.d.Pool.QueryRow(context.Background(), `SELECT synchro.is_ready()`).Scan(&ready)
		return !ready, err
	})
}

// docsOf is what user u holds of app.docs (or the relation it was renamed
// to): "id=title=n".
func docsOf(t *testing.T, e *syncEnv, relation, u string) []string {
	t.Helper()
	return rowsOf(t, e.d, `SELECT id || '=' || coalesce(title, '') || '=' || coalesce(n::text, '') FROM `+relation+` WHERE owner_id = $1`, u)
}

// replicaDocs is the replica's docs rows of scope as "id=title=n".
func replicaDocs(r *replica, scope string) []string {
	var got []string
	for k, row := range r.rows[scope] {
		if !strings.HasPrefix(k, "docs/") {
			continue
		}
		id := strings.TrimSuffix(strings.TrimPrefix(k, `docs/{"id":"`), `"}`)
		title, _ := row.Row["title"].(string)
		n := ""
		switch v := row.Row["n"].(type) {
		case string:
			n = v
		case float64:
			n = strconv.FormatFloat(v, 'f', -1, 64)
		}
		got = append(got, id+"="+title+"="+n)
	}
	sort.Strings(got)
	return got
}

// TestDriftRecovery walks each documented way out of relation drift from the
// block to a ready stream whose clients hold exactly the database's rows:
//   - a renamed relation: reconfigure_table under its new name (applied to the
//     registry at once while capture is blocked), then a stream reset;
//   - a retyped registered column: reconfigure_table, which restages the
//     table's projection (its values change rendering) and activates in order;
//   - a changed primary key: unregister_table (its blocked events are then
//     left out), retrying the poison, and register_table again (bootstrapped).
func TestDriftRecovery(t *testing.T) {
	t.Parallel()
	seed := `INSERT INTO app.docs (id, owner_id, title, n) SELECT 'd' || g, 'u' || (g % 3 + 1), 'doc ' || g, g FROM generate_series(1, 300) g`
	t.Run("renamed_relation", func(t *testing.T) {
		t.Parallel()
		e := newSyncEnv(t, seed)
		dropResetSlots(t, e)
		e.d.Exec(t, `ALTER TABLE app.docs RENAME TO documents`)
		e.d.Exec(t, `INSERT INTO app.documents (id, owner_id, title) VALUES ('renamed', 'u1', 'after the rename')`)
		waitCaptureBlocked(t, e)
		if id := queryText(t, e.d, `SELECT coalesce(synchro.reconfigure_table('app.documents', '{"kind":"column","template":"user:{owner_id}"}', '{"name":"docs"}')::text, '')`); id != "" {
			t.Fatalf("a reconfiguration while capture is blocked recorded change %s, want it applied at once", id)
		}
		if _, err := reset.Run(context.Background(), resetConfig(e.d, true)); err != nil {
			t.Fatalf("reset: %v", err)
		}
		e.d.Exec(t, `UPDATE app.documents SET title = 'later' WHERE id = 'd3'`)
		waitMaterialized(t, e.d)
		waitCaptureReady(t, e.d)
		requireDocsRebuilt(t, e, "app.documents", "u1")
	})
	t.Run("retyped_column", func(t *testing.T) {
		t.Parallel()
		e := newSyncEnv(t, seed)
		dropResetSlots(t, e)
		e.d.Exec(t, `ALTER TABLE app.docs DROP CONSTRAINT docs_n_check, ALTER COLUMN n TYPE text USING 'n' || n`)
		waitCaptureBlocked(t, e)
		id := queryText(t, e.d, `SELECT synchro.reconfigure_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}')::text`)
		if n := queryInt(t, e.d, `SELECT cardinality(relation_ids) FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id); n != 1 {
			t.Fatalf("a retyped column's reconfiguration stages %d relations, want the table", n)
		}
		e.d.Exec(t, `UPDATE app.docs SET title = 'during', n = 'n-during' WHERE id = 'd3'`)
		bootstrapNow(t, e.d)
		waitMaterialized(t, e.d)
		waitCaptureReady(t, e.d)
		requireDocsRebuilt(t, e, "app.docs", "u1")
	})
	t.Run("changed_key", func(t *testing.T) {
		t.Parallel()
		e := newSyncEnv(t, `CREATE TABLE app.keyed (id text PRIMARY KEY, alt text NOT NULL UNIQUE, owner_id text NOT NULL, title text);
			INSERT INTO app.keyed SELECT 'k' || g, 'a' || g, 'u1', 'row ' || g FROM generate_series(1, 50) g`)
		dropResetSlots(t, e)
		e.d.Exec(t, `DELETE FROM app.keyed`)
		e.d.Exec(t, `SELECT synchro.register_table('app.keyed', '{"kind":"column","template":"user:{owner_id}"}')`)
		e.d.Exec(t, `INSERT INTO app.keyed SELECT 'k' || g, 'a' || g, 'u1', 'row ' || g FROM generate_series(1, 50) g`)
		waitMaterialized(t, e.d)
		e.d.Exec(t, `ALTER TABLE app.keyed DROP CONSTRAINT keyed_pkey, ADD PRIMARY KEY (alt)`)
		e.d.Exec(t, `INSERT INTO app.keyed VALUES ('k-new', 'a-new', 'u1', 'after the key change')`)
		waitCaptureBlocked(t, e)
		poison := queryInt(t, e.d, `SELECT poison_id FROM synchro.poison_txn WHERE resolved_at IS NULL`)
		id := queryText(t, e.d, `SELECT synchro.unregister_table('app.keyed')::text`)
		if !queryBool(t, e.d, `SELECT synchro.retry_poison($1)`, poison) {
			t.Fatal("retry_poison returned false")
		}
		waitChangeActivated(t, e.d, id)
		waitMaterialized(t, e.d)
		waitCaptureReady(t, e.d)
		e.d.Exec(t, `SELECT synchro.register_table('app.keyed', '{"kind":"column","template":"user:{owner_id}"}')`)
		bootstrapNow(t, e.d)
		waitMaterialized(t, e.d)
		waitCaptureReady(t, e.d)
		e.connect(t, "u1", "k1")
		r := newReplica()
		e.rebuildScope(t, "u1", "k1", "user:u1", 100, r)
		e.requireConverged(t, r, "user:u1")
		var keys []string
		for k := range r.rows["user:u1"] {
			if strings.HasPrefix(k, "keyed/") {
				keys = append(keys, k)
			}
		}
		if len(keys) != 51 || !strings.Contains(strings.Join(keys, ","), `keyed/{"alt":"a-new"}`) {
			t.Fatalf("the re-registered table's rows in user:u1: %d, want 51 keyed by alt", len(keys))
		}
	})
}

// requireDocsRebuilt rebuilds user u's scope on a new client and requires its
// docs to be exactly relation's rows of u, with a matching checksum.
func requireDocsRebuilt(t *testing.T, e *syncEnv, relation, u string) {
	t.Helper()
	client := "rebuilt-" + u
	e.connect(t, u, client)
	r := newReplica()
	e.rebuildScope(t, u, client, "user:"+u, 100, r)
	want := docsOf(t, e, relation, u)
	sort.Strings(want)
	if got := replicaDocs(r, "user:"+u); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("user:%s holds %d docs, the database %d:\nreplica  %.300v\ndatabase %.300v", u, len(got), len(want), got, want)
	}
	e.requireConverged(t, r, "user:"+u)
}
