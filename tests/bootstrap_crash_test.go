package tests

// A projection bootstrap whose coordinator is killed, or whose PostgreSQL
// restarts, part way: it ends activated correctly (resumed from its durable
// phase) or is started over under a new candidate slot and then activated,
// while an application writes throughout.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/reset"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// crashRows is how many rows app.items holds when it is registered.
const crashRows = 2000

// crashItemsOf is the rule of app.items in these tests over the live tables:
// the items whose owner (app.owners, the path's parent) maps to user $1.
const crashItemsOf = `i.owner_id IN (SELECT o.id FROM app.owners o WHERE o.user_id = $1)`

// bootstrapUnderWrites fills app.items and its parent app.owners (u1..u20, each
// mapped to the user of its name), starts an items writer and registers
// app.items with a path rule through app.owners, both populated: the
// registration records a bootstrap of both. It returns the writer, the
// bootstrap's id and candidate slot, and a replica of u1's scope holding a
// cursor from before the registration.
func bootstrapUnderWrites(t *testing.T, e *syncEnv) (w *itemsWriter, id, slot string, old *replica) {
	t.Helper()
	e.connect(t, "u1", "old")
	old = newReplica()
	e.rebuildScope(t, "u1", "old", "user:u1", 100, old)
	createItems(t, e.d, crashRows)
	e.d.Exec(t, `CREATE TABLE app.owners (id text PRIMARY KEY, user_id text);
		INSERT INTO app.owners SELECT 'u' || g, 'u' || g FROM generate_series(1, 20) g;
		ALTER TABLE app.items ADD FOREIGN KEY (owner_id) REFERENCES app.owners;
		CREATE INDEX ON app.items (owner_id)`)
	w = startItemsWriter(t, e.d, crashRows)
	waitFor(t, "writes before the registration", 10*time.Second, func() (bool, error) { return w.count() >= 5, nil })
	e.d.Exec(t, `SELECT synchro.register_table('app.items', '{"kind":"path","path":["owner_id"],"template":"user:{user_id}"}')`)
	got := rowsOf(t, e.d, `SELECT reset_id::text, candidate_slot, cardinality(relation_ids) FROM synchro.stream_reset WHERE kind = 'bootstrap' AND phase = 'staging'`)
	if len(got) != 1 || !strings.HasSuffix(got[0], "|2") {
		t.Fatalf("the registration recorded %v, want one bootstrap of app.items and app.owners", got)
	}
	parts := strings.Split(got[0], "|")
	waitFor(t, "writes after the registration", 10*time.Second, func() (bool, error) { return w.count() >= 15, nil })
	return w, parts[0], parts[1], old
}

// killedBootstrap runs the bootstrap coordinator and kills it (its context
// cancelled, the hook's error returned: its connections close and nothing after
// the point runs, as when its process dies) at point, or at the first catch-up
// step step; it fails unless the run was killed there.
func killedBootstrap(t *testing.T, d *testdb.DB, point reset.Point, step wal.Step) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := resetConfig(d, false)
	var fired atomic.Bool
	killed := errors.New("killed")
	kill := func() error {
		if fired.CompareAndSwap(false, true) {
			cancel()
			return killed
		}
		return nil
	}
	if point != "" {
		cfg.AfterPoint = func(p reset.Point) error {
			if p == point {
				return kill()
			}
			return nil
		}
	} else {
		cfg.AfterStep = func(s wal.Step) error {
			if s == step {
				return kill()
			}
			return nil
		}
	}
	res, err := reset.Bootstrap(ctx, cfg)
	if !fired.Load() || err == nil {
		t.Fatalf("first run: %v (phase %s, killed %v), want it killed", err, res.Phase, fired.Load())
	}
}

// requireBootstrapOutcome checks a bootstrap that ended retired, once the
// writer w stopped: nothing of its stage or candidate slots is left; the active
// stream materialized none of its relations' events before its barrier and the
// stage none after it; the cursor from before it (old, of u1) is told to
// rebuild; every user's rebuilt scope equals the database row for row, every
// row once, and a pull right after delivers nothing again; a write of the
// path's parent afterwards moves items between users' scopes at the next pull.
func requireBootstrapOutcome(t *testing.T, e *syncEnv, w *itemsWriter, id string, old *replica) {
	t.Helper()
	at := w.count()
	waitFor(t, "writes after the activation", 20*time.Second, func() (bool, error) { return w.count() >= at+10, nil })
	w.stop(t)
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)
	if got := queryText(t, e.d, `SELECT phase FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id); got != "retired" {
		t.Fatalf("the bootstrap is %s, want retired", got)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.stream_reset WHERE kind = 'bootstrap' AND reset_id <> $1::uuid`, id); n != 0 {
		t.Fatalf("%d other bootstraps recorded, want the one started over or resumed", n)
	}
	if got := rowsOf(t, e.d, `SELECT slot_name FROM pg_replication_slots WHERE database = current_database() AND slot_name LIKE 'synchro_boot%'`); len(got) != 0 {
		t.Fatalf("candidate slots left: %v", got)
	}
	for _, table := range []string{"projection", "row_version", "membership", "event_ledger"} {
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.`+table+` x WHERE x.stream_generation <> (SELECT stream_generation FROM synchro.progress)`); n != 0 {
			t.Fatalf("%d rows of synchro.%s left of a stage", n, table)
		}
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.event_ledger l JOIN synchro.progress p USING (stream_generation), synchro.stream_reset r
		WHERE r.reset_id = $1::uuid AND l.relation_id = ANY (r.relation_ids) AND l.commit_lsn <= r.barrier_commit_lsn`, id); n != 0 {
		t.Fatalf("the active stream materialized %d events of the bootstrap's relations before its barrier", n)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.effect f JOIN synchro.progress p USING (stream_generation)
		JOIN synchro.synced_table s USING (table_id), synchro.stream_reset r
		WHERE r.reset_id = $1::uuid AND s.relation_id = ANY (r.relation_ids) AND f.commit_lsn <= r.barrier_commit_lsn`, id); n != 0 {
		t.Fatalf("%d effects of the bootstrapped table at or before its barrier", n)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM app.items WHERE id LIKE 'w-%'`); n < 30 {
		t.Fatalf("the writer inserted %d rows, want writes throughout", n)
	}

	body := requireOK(t, "pull with a cursor from before the bootstrap", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "old",
		"scopes": map[string]any{"user:u1": map[string]any{"cursor": old.cursors["user:u1"]}}, "limit": 100}))
	if got := mustMarshal(t, body["rebuild"]); got != `["user:u1"]` || len(body["changes"].([]any)) != 0 {
		t.Fatalf("the old cursor got rebuild %s and %d changes, want [\"user:u1\"] alone", got, len(body["changes"].([]any)))
	}
	users := []string{"u1", "u2", "u7", "u9"}
	replicas := map[string]*replica{}
	for _, u := range users {
		client := "after-" + u
		e.connect(t, u, client)
		r := newReplica()
		replicas[u] = r
		e.pagingRebuild(t, u, client, "user:"+u, 300, r, nil) // each row once, the final checksum the server's
		want := itemsOf(t, e.d, crashItemsOf, u)
		if u != "u7" && len(want) == 0 {
			t.Fatalf("user %s owns no items: the check proves nothing", u)
		}
		requireScopeTable(t, r, "user:"+u, "items", want)
		e.requireConverged(t, r, "user:"+u)
		if delivered, _ := e.pagingPull(t, u, client, 100, r); len(delivered) != 0 {
			t.Fatalf("a pull right after the rebuild of user:%s delivered %d changes again: %.300v", u, len(delivered), delivered)
		}
	}
	requireNoDuplicateEdges(t, e.d)
	requireDigests(t, e.d)

	// The path's parent changes: its items move from u9's scope to u1's.
	e.d.Exec(t, `UPDATE app.owners SET user_id = 'u1' WHERE id = 'u9'`)
	waitMaterialized(t, e.d)
	for _, u := range users {
		e.syncUser(t, u, "after-"+u, replicas[u])
		requireScopeTable(t, replicas[u], "user:"+u, "items", itemsOf(t, e.d, crashItemsOf, u))
		e.requireConverged(t, replicas[u], "user:"+u)
	}
	if n := len(replicas["u9"].rows["user:u9"]); n != 0 {
		t.Fatalf("user:u9 holds %d rows after its owner row moved to u1", n)
	}
}

// TestBootstrapCrash kills the bootstrap coordinator inside its staging (after
// the candidate slot is created; inside the baseline transaction, after one
// relation's rows were copied) and in its catch-up (after the baseline; after a
// staged batch is materialized; after the barrier; after verification), while
// a writer changes the table throughout and the path's parent changes while
// the coordinator is down. A bootstrap killed in staging is started over under
// a new candidate slot (the old one dropped, what it staged discarded); a later
// one resumes from its own slot; one killed once ready is activated by the
// capture worker without it, and the next run retires it. Each ends with
// clients' scopes equal to the database, every write there once.
func TestBootstrapCrash(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		point reset.Point
		step  wal.Step
	}{
		{name: "staging_slot_created", point: reset.PointSlotCreated},
		{name: "staging_baseline", point: reset.PointStaging},
		{name: "catch_up_baselined", point: reset.PointBaselined},
		{name: "catch_up_materialized", step: wal.StepMaterialized},
		{name: "catch_up_barrier", point: reset.PointBarrier},
		{name: "ready", point: reset.PointReady},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newSyncEnv(t, "")
			dropResetSlots(t, e)
			w, id, slot, old := bootstrapUnderWrites(t, e)
			killedBootstrap(t, e.d, c.point, c.step)
			restarted := c.point == reset.PointSlotCreated || c.point == reset.PointStaging
			if got := queryText(t, e.d, `SELECT phase || ' ' || candidate_slot FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id); restarted && got != "staging "+slot {
				t.Fatalf("killed in staging, the bootstrap is %q, want staging with its slot", got)
			}
			if restarted {
				if !queryBool(t, e.d, `SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)`, slot) {
					t.Fatalf("the candidate slot %s of the killed staging does not exist", slot)
				}
				if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.projection j JOIN synchro.stream_reset r ON r.target_generation = j.stream_generation
					WHERE r.reset_id = $1::uuid`, id); n != 0 {
					t.Fatalf("%d staged projections survive the killed baseline transaction", n)
				}
			}
			waitSlotInactive(t, e.d, slot) // the killed coordinator's walsender ends
			if c.point != reset.PointReady && strings.Contains(queryText(t, e.d, `SELECT synchro.schema_manifest()::text`), `"items"`) {
				t.Fatal("the table is in the manifest before the bootstrap is activated")
			}
			// The path's parent changes while the coordinator is down.
			e.d.Exec(t, `UPDATE app.owners SET user_id = 'u2' WHERE id = 'u7'`)

			var gen string
			if !restarted {
				gen = queryText(t, e.d, `SELECT target_generation::text FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id)
			}
			if c.point == reset.PointReady {
				// Verified: the capture worker activates it at its barrier on its own.
				waitChangeActivated(t, e.d, id)
				res, err := reset.Bootstrap(context.Background(), resetConfig(e.d, false))
				if err != nil || res.Phase != "" {
					t.Fatalf("the run after the activation: %v (%+v), want nothing left to run", err, res)
				}
			} else if res := bootstrapNow(t, e.d); res.ResetID != id {
				t.Fatalf("the second run ran bootstrap %s, want %s again", res.ResetID, id)
			}
			got := queryText(t, e.d, `SELECT candidate_slot || ' ' || target_generation FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id)
			if restarted && strings.HasPrefix(got, slot+" ") {
				t.Fatalf("the bootstrap killed in staging was not started over under a new candidate slot: %s", got)
			}
			if !restarted && got != slot+" "+gen {
				t.Fatalf("the bootstrap killed after its baseline did not resume its own slot and stage: %s, want %s %s", got, slot, gen)
			}
			requireBootstrapOutcome(t, e, w, id, old)
		})
	}
}

// TestBootstrapPostgresRestart restarts PostgreSQL (an immediate stop) while a
// bootstrap run by the coordinator loop of synchrod (reset.RunBootstraps) is
// inside its baseline transaction, and while it catches up: the first is
// started over under a new candidate slot, the second resumes its own slot
// from its durable acknowledgement; both end activated with clients' scopes
// equal to the database, a writer's writes made throughout (and retried
// through the restart) there once.
func TestBootstrapPostgresRestart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		point reset.Point
		step  wal.Step
	}{
		{name: "staging", point: reset.PointStaging},
		{name: "catch_up", step: wal.StepMaterialized},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, data, port := ownClusterAt(t)
			e := newSyncEnvOn(t, testdb.NewAt(t, url), "")
			dropResetSlots(t, e)
			w, id, slot, old := bootstrapUnderWrites(t, e)

			// The cluster restarts once, on the coordinator's goroutine (no
			// t.Fatal there: the outcome is checked below).
			var fired atomic.Bool
			restartErr := make(chan error, 1)
			restart := func() {
				if !fired.CompareAndSwap(false, true) {
					return
				}
				_, err := pgcluster(t, "crash", data)
				if err == nil {
					_, err = pgcluster(t, "start", data, port)
				}
				restartErr <- err
			}
			cfg := resetConfig(e.d, false)
			cfg.AfterPoint = func(p reset.Point) error {
				if p == c.point {
					restart()
				}
				return nil
			}
			cfg.AfterStep = func(s wal.Step) error {
				if s == c.step {
					restart()
				}
				return nil
			}
			log := &lockedBuffer{}
			cfg.Log = slog.New(slog.NewTextHandler(log, nil))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				reset.RunBootstraps(ctx, e.d.Pool, cfg, 100*time.Millisecond)
			}()
			defer func() { cancel(); <-done }()

			select {
			case err := <-restartErr:
				if err != nil {
					t.Fatalf("restarting PostgreSQL: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("PostgreSQL was not restarted during the bootstrap within 60s")
			}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("coordinator log:\n%s", tail(log.String(), 4000))
				}
			})
			// Queries fail while the pools replace their connections to the
			// restarted cluster: they count as not yet, the deadline bounds it.
			waitFor(t, "the bootstrap retired after the restart", 120*time.Second, func() (bool, error) {
				var phase string
				err := e.d.Pool.QueryRow(context.Background(), `SELECT phase FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id).Scan(&phase)
				return err == nil && phase == "retired", nil
			})
			cancel()
			<-done
			got := queryText(t, e.d, `SELECT candidate_slot FROM synchro.stream_reset WHERE reset_id = $1::uuid`, id)
			if c.point == reset.PointStaging && got == slot {
				t.Fatalf("the bootstrap whose baseline the restart ended was not started over under a new candidate slot (%s)", got)
			}
			if c.step != "" && got != slot {
				t.Fatalf("the bootstrap restarted while catching up did not resume its own slot %s: %s", slot, got)
			}
			requireBootstrapOutcome(t, e, w, id, old)
		})
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("...%s", s[len(s)-n:])
}
