package tests

// Projection bootstraps of tables whose scope rules read other relations
// (path, members, members through a path, sql with an impacts relation), every
// relation holding rows when the table is registered: memberships are right
// for the rows that existed, for the writes made while the bootstrap runs, and
// from the first write after its activation on.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/synchro-sync/synchro/internal/reset"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// bootstrapDuring runs the bootstrap coordinator once, like bootstrapNow, and
// commits during[p] right after its point p: at reset.PointSlotCreated after the
// candidate's snapshot (the catch-up brings it), at reset.PointBaselined after
// the baseline, at reset.PointBarrier right after the barrier (the first
// transaction after the activation in source order). It fails unless every
// write committed and the bootstrap ends retired.
func bootstrapDuring(t *testing.T, d *testdb.DB, during map[reset.Point]string) reset.Result {
	t.Helper()
	cfg := resetConfig(d, false)
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var mu sync.Mutex
	fired := map[reset.Point]error{}
	cfg.AfterPoint = func(p reset.Point) error {
		sql, ok := during[p]
		mu.Lock()
		_, done := fired[p]
		mu.Unlock()
		if !ok || done {
			return nil
		}
		err := d.ExecErr(sql) // on the barrier's goroutine too: no t.Fatal here
		mu.Lock()
		fired[p] = err
		mu.Unlock()
		return err
	}
	res, err := reset.Bootstrap(context.Background(), cfg)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	if res.Phase != "retired" {
		t.Fatalf("bootstrap ended %q, want retired", res.Phase)
	}
	for p := range during {
		if err, ok := fired[p]; !ok || err != nil {
			t.Fatalf("the write at %s: fired %v, %v", p, ok, err)
		}
	}
	return res
}

// syncUser brings the replica of user's client up to date: it pulls every scope
// it holds, and rebuilds each scope the pull lists in rebuild.
func (e *syncEnv) syncUser(t *testing.T, user, client string, r *replica) {
	t.Helper()
	body := e.pullAll(t, user, client, 500, r)
	rebuild, _ := body["rebuild"].([]any)
	for _, s := range rebuild {
		e.rebuildScope(t, user, client, s.(string), 500, r)
	}
}

// requireNoDuplicateEdges fails when a row has two open membership edges in one
// scope of the active generation.
func requireNoDuplicateEdges(t *testing.T, d *testdb.DB) {
	t.Helper()
	if n := queryInt(t, d, `SELECT count(*) - count(DISTINCT (table_id, key, scope)) FROM synchro.membership m
		JOIN synchro.progress p USING (stream_generation) WHERE m.to_lsn IS NULL`); n != 0 {
		t.Fatalf("%d duplicate open membership edges", n)
	}
}

// ruleCase is a table whose rule reads other relations, registered while every
// one of them holds rows.
type ruleCase struct {
	name     string
	setup    string                 // creates and fills the relations (none registered)
	first    string                 // a registration bootstrapped before the case's (optional)
	register string                 // the registration
	staged   int64                  // relations the bootstrap stages
	want     map[string]string      // wire table -> its rows ("id=title") user $1 should hold, over the live tables
	during   map[reset.Point]string // writes while the bootstrap runs (bootstrapDuring)
	steps    []string               // writes after the activation, each checked on its own
	// then, when set, runs after the steps with the env, the tables checked
	// (it may add one) and the check.
	then func(t *testing.T, e *syncEnv, want map[string]string, check func(what string))
}

// The relations of the members-through-a-path cases, and those of the sql cases.
const (
	pmSetup = `CREATE SCHEMA pm;
		CREATE TABLE pm.projects (id text PRIMARY KEY, name text);
		CREATE TABLE pm.project_members (id text PRIMARY KEY, project_id text NOT NULL REFERENCES pm.projects, user_id text NOT NULL);
		CREATE TABLE pm.tasks (id text PRIMARY KEY, project_id text REFERENCES pm.projects, title text);
		CREATE INDEX ON pm.project_members (project_id);
		CREATE INDEX ON pm.tasks (project_id);
		INSERT INTO pm.projects SELECT 'pr' || g, 'project ' || g FROM generate_series(1, 30) g;
		INSERT INTO pm.project_members SELECT 'm' || g, 'pr' || (g % 30 + 1), 'u' || ((g + g / 30) % 6 + 1) FROM generate_series(1, 90) g;
		INSERT INTO pm.tasks SELECT 't' || g, CASE WHEN g % 101 <> 0 THEN 'pr' || (g % 30 + 1) END, 'task ' || g FROM generate_series(1, 1500) g`
	pmRegister = `SELECT synchro.register_table('pm.tasks', '{"kind":"members","path":["project_id"],"relation":"pm.project_members",
		"column":"project_id","template":"user:{user_id}"}', '{"name":"pm_tasks"}')`
	pmTasks = `SELECT t.id || '=' || coalesce(t.title, '') FROM pm.tasks t
		WHERE EXISTS (SELECT FROM pm.project_members m WHERE m.project_id = t.project_id AND m.user_id = $1)`

	reportsSetup = `CREATE TABLE app.reports (id text PRIMARY KEY, owner_id text, title text);
		CREATE TABLE app.report_readers (id bigint PRIMARY KEY, report_id text NOT NULL, user_id text);
		INSERT INTO app.reports SELECT 'r' || g, CASE WHEN g % 3 = 0 THEN 'u' || (g % 6 + 1) END, 'report ' || g FROM generate_series(1, 300) g;
		INSERT INTO app.report_readers SELECT g, 'r' || (g % 300 + 1), 'u' || ((g + g / 300) % 6 + 1) FROM generate_series(1, 600) g`
	reportsRegister = `SELECT synchro.register_table('app.reports', $${
		"kind": "sql",
		"membership": "SELECT 'user:' || (x.image->>'user_id') FROM synchro.projected('app.report_readers') x WHERE x.image->>'report_id' = $1->>'id' AND x.image->>'user_id' IS NOT NULL UNION SELECT 'user:' || ($1->>'owner_id') WHERE $1->>'owner_id' IS NOT NULL",
		"impacts": {"app.report_readers": "SELECT $1->>'report_id'"}
	}$$)`
	reportsOf = `SELECT r.id || '=' || coalesce(r.title, '') FROM app.reports r
		WHERE r.owner_id = $1 OR EXISTS (SELECT FROM app.report_readers x WHERE x.report_id = r.id AND x.user_id = $1)`
)

var (
	pmDuring = map[reset.Point]string{
		reset.PointSlotCreated: `UPDATE pm.tasks SET project_id = 'pr2', title = 'moved while staged' WHERE id = 't1';
			INSERT INTO pm.project_members VALUES ('m-new1', 'pr3', 'u1')`,
		reset.PointBaselined: `DELETE FROM pm.project_members WHERE id = 'm4'; UPDATE pm.project_members SET project_id = 'pr6' WHERE id = 'm5'`,
		reset.PointBarrier:   `UPDATE pm.tasks SET project_id = 'pr8' WHERE id = 't2'`,
	}
	pmSteps = []string{
		// A task moves to another project.
		`UPDATE pm.tasks SET project_id = 'pr12', title = 'moved' WHERE id = 't10'`,
		// A member joins, another leaves.
		`INSERT INTO pm.project_members VALUES ('m-new2', 'pr13', 'u5')`,
		`DELETE FROM pm.project_members WHERE id = 'm14'`,
		// A membership moves to another project; another's user changes.
		`UPDATE pm.project_members SET project_id = 'pr16' WHERE id = 'm15'; UPDATE pm.project_members SET user_id = 'u1' WHERE id = 'm17'`,
		// A project (the step relation) inserted with a member and tasks in one transaction.
		`INSERT INTO pm.projects VALUES ('pr-new', 'new'); INSERT INTO pm.project_members VALUES ('m-new3', 'pr-new', 'u3');
		 UPDATE pm.tasks SET project_id = 'pr-new' WHERE id IN ('t18', 't101')`,
		// A project deleted: its tasks lose it, its members go.
		`UPDATE pm.tasks SET project_id = NULL WHERE project_id = 'pr20'; DELETE FROM pm.project_members WHERE project_id = 'pr20';
		 DELETE FROM pm.projects WHERE id = 'pr20'`,
	}
	reportsDuring = map[reset.Point]string{
		reset.PointSlotCreated: `INSERT INTO app.report_readers VALUES (10001, 'r1', 'u1'); UPDATE app.reports SET owner_id = 'u2' WHERE id = 'r2'`,
		reset.PointBaselined:   `UPDATE app.report_readers SET report_id = 'r4' WHERE id = 7; DELETE FROM app.report_readers WHERE id = 8`,
		reset.PointBarrier:     `UPDATE app.report_readers SET user_id = 'u3' WHERE id = 9`,
	}
	reportsSteps = []string{
		// A reader added; one removed.
		`INSERT INTO app.report_readers VALUES (10002, 'r10', 'u4')`,
		`DELETE FROM app.report_readers WHERE id = 11`,
		// A reader moves to another report; another's user changes.
		`UPDATE app.report_readers SET report_id = 'r13' WHERE id = 12; UPDATE app.report_readers SET user_id = 'u6' WHERE id = 14`,
		// A report's own column changes.
		`UPDATE app.reports SET owner_id = 'u5', title = 'owned' WHERE id = 'r16'`,
		// A report with a reader in one transaction, reader first.
		`INSERT INTO app.report_readers VALUES (10003, 'r-new', 'u2'); INSERT INTO app.reports VALUES ('r-new', NULL, 'new')`,
	}
)

var bootstrapRuleCases = []ruleCase{
	{
		name: "path",
		setup: `CREATE TABLE app.notebooks (id text PRIMARY KEY, owner_id text, title text);
			CREATE TABLE app.pages (id text PRIMARY KEY, notebook_id text REFERENCES app.notebooks, title text);
			CREATE INDEX ON app.pages (notebook_id);
			INSERT INTO app.notebooks SELECT 'n' || g, CASE WHEN g < 40 THEN 'u' || (g % 6 + 1) END, 'notebook ' || g FROM generate_series(1, 40) g;
			INSERT INTO app.pages SELECT 'p' || g, CASE WHEN g % 97 <> 0 THEN 'n' || (g % 40 + 1) END, 'page ' || g FROM generate_series(1, 2000) g`,
		register: `SELECT synchro.register_table('app.pages', '{"kind":"path","path":["notebook_id"],"template":"user:{owner_id}"}')`,
		staged:   2,
		want: map[string]string{"pages": `SELECT p.id || '=' || coalesce(p.title, '') FROM app.pages p
			JOIN app.notebooks n ON n.id = p.notebook_id WHERE n.owner_id = $1`},
		during: map[reset.Point]string{
			reset.PointSlotCreated: `UPDATE app.pages SET notebook_id = 'n2', title = 'moved while staged' WHERE id = 'p1';
				UPDATE app.notebooks SET owner_id = 'u5' WHERE id = 'n3'`,
			reset.PointBaselined: `INSERT INTO app.pages VALUES ('p-new', 'n4', 'new while catching up');
				DELETE FROM app.pages WHERE id = 'p2'; UPDATE app.notebooks SET owner_id = NULL WHERE id = 'n6'`,
			reset.PointBarrier: `UPDATE app.notebooks SET owner_id = 'u1' WHERE id = 'n5'`,
		},
		steps: []string{
			// A page moves to a notebook of another owner.
			`UPDATE app.pages SET notebook_id = 'n7', title = 'moved' WHERE id = 'p10'`,
			// A parent changes owner: its pages follow.
			`UPDATE app.notebooks SET owner_id = 'u2' WHERE id = 'n8'`,
			// A parent without an owner gets one; a page without a parent gets one.
			`UPDATE app.notebooks SET owner_id = 'u4' WHERE id = 'n40'; UPDATE app.pages SET notebook_id = 'n11' WHERE id = 'p97'`,
			// A new parent, pages moved into it, in one transaction.
			`INSERT INTO app.notebooks VALUES ('n41', 'u3', 'new'); UPDATE app.pages SET notebook_id = 'n41' WHERE id IN ('p12', 'p13')`,
			// A parent and its pages deleted.
			`DELETE FROM app.pages WHERE notebook_id = 'n9'; DELETE FROM app.notebooks WHERE id = 'n9'`,
		},
		// A second populated table through the same parent, now served: only it
		// is staged, its rows evaluated over the parent's active projection,
		// which changes while the bootstrap runs (in the active stream).
		then: func(t *testing.T, e *syncEnv, want map[string]string, check func(string)) {
			e.d.Exec(t, `CREATE TABLE app.sections (id text PRIMARY KEY, notebook_id text REFERENCES app.notebooks, title text);
				INSERT INTO app.sections SELECT 's' || g, 'n' || (g % 41 + 1), 'section ' || g FROM generate_series(1, 300) g WHERE g % 41 + 1 <> 9;
				SELECT synchro.register_table('app.sections', '{"kind":"path","path":["notebook_id"],"template":"user:{owner_id}"}')`)
			// The served parent changes while the bootstrap runs, and right after its barrier.
			res := bootstrapDuring(t, e.d, map[reset.Point]string{
				reset.PointSlotCreated: `UPDATE app.notebooks SET owner_id = 'u6' WHERE id = 'n2'`,
				reset.PointBaselined:   `UPDATE app.notebooks SET owner_id = 'u1' WHERE id = 'n3'; UPDATE app.sections SET notebook_id = 'n4' WHERE id = 's1'`,
				reset.PointBarrier:     `UPDATE app.notebooks SET owner_id = 'u2' WHERE id = 'n4'`,
			})
			if n := queryInt(t, e.d, `SELECT cardinality(relation_ids) FROM synchro.stream_reset WHERE reset_id = $1::uuid`, res.ResetID); n != 1 {
				t.Fatalf("the second table's bootstrap staged %d relations, want the table alone", n)
			}
			waitMaterialized(t, e.d)
			want["sections"] = `SELECT s.id || '=' || coalesce(s.title, '') FROM app.sections s
				JOIN app.notebooks n ON n.id = s.notebook_id WHERE n.owner_id = $1`
			check("the second table's activation")
			e.d.Exec(t, `UPDATE app.notebooks SET owner_id = 'u3' WHERE id = 'n1'`)
			waitMaterialized(t, e.d)
			check("the shared parent's owner changed")
		},
	},
	{
		name: "members",
		setup: `CREATE TABLE app.boards (id text PRIMARY KEY, title text);
			CREATE TABLE app.board_members (id bigint PRIMARY KEY, board_id text NOT NULL REFERENCES app.boards, user_id text);
			CREATE INDEX ON app.board_members (board_id);
			INSERT INTO app.boards SELECT 'b' || g, 'board ' || g FROM generate_series(1, 300) g;
			INSERT INTO app.board_members SELECT g, 'b' || (g % 300 + 1), 'u' || ((g + g / 300) % 6 + 1) FROM generate_series(1, 900) g`,
		register: `SELECT synchro.register_table('app.boards', '{"kind":"members","relation":"app.board_members","column":"board_id","template":"user:{user_id}"}')`,
		staged:   2,
		want: map[string]string{"boards": `SELECT b.id || '=' || coalesce(b.title, '') FROM app.boards b
			WHERE EXISTS (SELECT FROM app.board_members m WHERE m.board_id = b.id AND m.user_id = $1)`},
		during: map[reset.Point]string{
			reset.PointSlotCreated: `INSERT INTO app.board_members VALUES (10001, 'b1', 'u1'); DELETE FROM app.board_members WHERE id = 5`,
			reset.PointBaselined: `UPDATE app.board_members SET user_id = 'u2' WHERE id = 6;
				UPDATE app.boards SET title = 'retitled while catching up' WHERE id = 'b8'`,
			reset.PointBarrier: `INSERT INTO app.board_members VALUES (10002, 'b3', 'u3')`,
		},
		steps: []string{
			// A membership added.
			`INSERT INTO app.board_members VALUES (10003, 'b10', 'u1')`,
			// Every membership of a board removed.
			`DELETE FROM app.board_members WHERE board_id = 'b11'`,
			// A membership moved to another board; another's user changed.
			`UPDATE app.board_members SET board_id = 'b13' WHERE id = 12; UPDATE app.board_members SET user_id = 'u6' WHERE id = 13`,
			// A membership's user becomes NULL: no scope.
			`UPDATE app.board_members SET user_id = NULL WHERE id = 14`,
			// A new board with a member, and a board deleted with its members.
			`INSERT INTO app.boards VALUES ('b-new', 'new'); INSERT INTO app.board_members VALUES (10004, 'b-new', 'u1');
			 DELETE FROM app.board_members WHERE board_id = 'b20'; DELETE FROM app.boards WHERE id = 'b20'`,
		},
	},
	{
		// A served table's rule changed to a members rule over a populated
		// membership relation not registered before (reconfigure_table).
		name: "members_reconfigured",
		setup: `CREATE TABLE app.boards (id text PRIMARY KEY, owner_id text, title text);
			CREATE TABLE app.board_members (id bigint PRIMARY KEY, board_id text NOT NULL REFERENCES app.boards, user_id text);
			CREATE INDEX ON app.board_members (board_id);
			INSERT INTO app.boards SELECT 'b' || g, 'u' || (g % 6 + 1), 'board ' || g FROM generate_series(1, 300) g;
			INSERT INTO app.board_members SELECT g, 'b' || (g % 300 + 1), 'u' || ((g + g / 300 + 3) % 6 + 1) FROM generate_series(1, 900) g`,
		first:    `SELECT synchro.register_table('app.boards', '{"kind":"column","template":"user:{owner_id}"}')`,
		register: `SELECT synchro.reconfigure_table('app.boards', '{"kind":"members","relation":"app.board_members","column":"board_id","template":"user:{user_id}"}')`,
		staged:   1,
		want: map[string]string{"boards": `SELECT b.id || '=' || coalesce(b.title, '') FROM app.boards b
			WHERE EXISTS (SELECT FROM app.board_members m WHERE m.board_id = b.id AND m.user_id = $1)`},
		during: map[reset.Point]string{
			reset.PointSlotCreated: `INSERT INTO app.board_members VALUES (10001, 'b1', 'u1'); UPDATE app.boards SET title = 'retitled while staged' WHERE id = 'b2'`,
			reset.PointBaselined: `UPDATE app.board_members SET user_id = 'u2' WHERE id = 6; INSERT INTO app.boards VALUES ('b-during', 'u1', 'during');
				INSERT INTO app.board_members VALUES (10005, 'b-during', 'u5')`,
			reset.PointBarrier: `INSERT INTO app.board_members VALUES (10002, 'b3', 'u3')`,
		},
		steps: []string{
			`INSERT INTO app.board_members VALUES (10003, 'b10', 'u4')`,
			`DELETE FROM app.board_members WHERE board_id = 'b11'`,
			`UPDATE app.board_members SET board_id = 'b13' WHERE id = 12; UPDATE app.board_members SET user_id = 'u6' WHERE id = 13`,
			`UPDATE app.boards SET owner_id = 'u1', title = 'owner no longer counts' WHERE id = 'b14'`,
		},
	},
	{
		name: "members_path", setup: pmSetup, register: pmRegister, staged: 3,
		want: map[string]string{"pm_tasks": pmTasks}, during: pmDuring, steps: pmSteps,
	},
	{
		// The membership relation is a synced table already served (each user
		// syncs their own memberships): the bootstrap stages the table and the
		// path's step relation, and reads the memberships' active projection.
		name: "members_path_served_members", setup: pmSetup,
		first:    `SELECT synchro.register_table('pm.project_members', '{"kind":"column","template":"user:{user_id}"}')`,
		register: pmRegister, staged: 2,
		want: map[string]string{"pm_tasks": pmTasks,
			"project_members": `SELECT m.id || '=' FROM pm.project_members m WHERE m.user_id = $1`},
		during: pmDuring, steps: pmSteps,
	},
	{
		name: "sql", setup: reportsSetup, register: reportsRegister, staged: 2,
		want: map[string]string{"reports": reportsOf}, during: reportsDuring, steps: reportsSteps,
	},
	{
		// The impacts relation is registered (register_dependency, itself
		// bootstrapped) before the table: while the table's bootstrap runs its
		// changes are materialized in the active stream, impacting rows not
		// served yet.
		name: "sql_registered_dependency", setup: reportsSetup,
		first:    `SELECT synchro.register_dependency('app.report_readers')`,
		register: reportsRegister, staged: 1,
		want: map[string]string{"reports": reportsOf}, during: reportsDuring, steps: reportsSteps,
	},
}

// TestBootstrapRules registers, for each rule kind that reads other relations,
// a table while it and every relation its rule reads hold rows (writes are
// made after the candidate's snapshot, after the baseline and right after the
// barrier). After the activation every user's rebuilt scope equals the rule
// over the live tables row for row, a cursor from before it is told to
// rebuild, and from the first write after it on (a child moved, a membership
// added, removed or moved, a dependency row changed) every user's pulled
// scope still equals it.
func TestBootstrapRules(t *testing.T) {
	t.Parallel()
	users := []string{"u1", "u2", "u3", "u4", "u5", "u6"}
	for _, c := range bootstrapRuleCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newSyncEnv(t, c.setup)
			dropResetSlots(t, e)
			if c.first != "" {
				e.d.Exec(t, c.first)
				bootstrapNow(t, e.d)
				waitMaterialized(t, e.d)
				waitCaptureReady(t, e.d)
			}
			e.connect(t, "u1", "old")
			old := newReplica()
			e.rebuildScope(t, "u1", "old", "user:u1", 100, old)

			e.d.Exec(t, c.register)
			if got := queryText(t, e.d, `SELECT phase || ' ' || cardinality(relation_ids) FROM synchro.stream_reset
				WHERE kind = 'bootstrap' AND phase <> 'retired'`); got != fmt.Sprintf("staging %d", c.staged) {
				t.Fatalf("the registration recorded bootstrap %q, want staging %d relations", got, c.staged)
			}
			res := bootstrapDuring(t, e.d, c.during)
			waitMaterialized(t, e.d)
			waitCaptureReady(t, e.d)
			if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.relation WHERE bootstrap_pending`); n != 0 {
				t.Fatalf("%d relations still pending after the activation", n)
			}
			if got := queryText(t, e.d, `SELECT phase FROM synchro.stream_reset WHERE reset_id = $1::uuid`, res.ResetID); got != "retired" {
				t.Fatalf("the bootstrap is %s", got)
			}

			// The cursor from before the bootstrap: rebuild, nothing else.
			body := requireOK(t, "pull with a cursor from before the bootstrap", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "old",
				"scopes": map[string]any{"user:u1": map[string]any{"cursor": old.cursors["user:u1"]}}, "limit": 100}))
			if got := mustMarshal(t, body["rebuild"]); got != `["user:u1"]` || len(body["changes"].([]any)) != 0 {
				t.Fatalf("the old cursor got rebuild %s and %d changes, want [\"user:u1\"] alone", got, len(body["changes"].([]any)))
			}

			want := maps.Clone(c.want)
			replicas := map[string]*replica{}
			// Each check after the first also requires that the write it
			// follows changed some user's rows (else it would prove nothing).
			var seen string
			check := func(what string) {
				t.Helper()
				waitCaptureReady(t, e.d)
				var all, counts []string
				for _, u := range users {
					r := replicas[u]
					if r == nil {
						e.connect(t, u, "c-"+u)
						r = newReplica()
						replicas[u] = r
						e.rebuildScope(t, u, "c-"+u, "user:"+u, 500, r)
					} else {
						e.syncUser(t, u, "c-"+u, r)
					}
					for _, table := range slices.Sorted(maps.Keys(want)) {
						want := rowsOf(t, e.d, want[table], u)
						if len(want) == 0 && what == "the activation" {
							t.Fatalf("user:%s should hold rows of %s after the activation; the case's data gives it none", u, table)
						}
						counts = append(counts, fmt.Sprintf("%s %s %d", u, table, len(want)))
						requireScopeTable(t, r, "user:"+u, table, want)
						all = append(all, u+":"+table+":"+strings.Join(want, ","))
					}
					e.requireConverged(t, r, "user:"+u)
				}
				t.Logf("%s: rows per user: %s", what, strings.Join(counts, ", "))
				requireNoDuplicateEdges(t, e.d)
				now := strings.Join(all, ";")
				if seen != "" && now == seen {
					t.Fatalf("%s: no user's rows changed; the step proves nothing", what)
				}
				seen = now
			}
			check("the activation")
			for i, sql := range c.steps {
				e.d.Exec(t, sql)
				waitMaterialized(t, e.d)
				check(fmt.Sprintf("write %d after the activation (%s)", i+1, strings.Join(strings.Fields(sql), " ")))
			}
			if c.then != nil {
				c.then(t, e, want, check)
			}
			requireDigests(t, e.d)
		})
	}
}

// TestBootstrapWritePolicy: while a table whose members rule reads a synced
// table (pm.tasks, whose rule reads pm.project_members) waits for its
// bootstrap, the default write policy still counts its rows that existed
// before the registration: a push that would join a project (giving the user
// its tasks, which they could not write) is refused as it is once the table is
// served, a membership of a project the user already belongs to is accepted;
// after the activation the user holds exactly the tasks of their projects.
func TestBootstrapWritePolicy(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, pmSetup)
	dropResetSlots(t, e)
	e.d.Exec(t, `SELECT synchro.register_table('pm.project_members', '{"kind":"column","template":"user:{user_id}"}')`)
	bootstrapNow(t, e.d)
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)
	e.connect(t, "u1", "c1")
	e.d.Exec(t, pmRegister)
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.relation WHERE bootstrap_pending`); n != 2 {
		t.Fatalf("%d relations pending, want pm.tasks and pm.projects", n)
	}
	// u1 is a member of pr13 (m12), not of pr3 nor pr4; both have tasks.
	push := func(when, join, member string) {
		t.Helper()
		if n := queryInt(t, e.d, `SELECT count(*) FROM pm.project_members WHERE project_id = $1 AND user_id = 'u1'`, join); n != 0 {
			t.Fatalf("u1 is a member of %s already", join)
		}
		resp := e.push(t, "u1", "c1",
			mut(when+"-join", "project_members", "insert", map[string]any{"id": "join-" + when}, map[string]any{"project_id": join, "user_id": "u1"}),
			mut(when+"-own", "project_members", "insert", map[string]any{"id": "own-" + when}, map[string]any{"project_id": member, "user_id": "u1"}))
		requireOutcome(t, resp, when+"-join", "policy_rejected")
		requireOutcome(t, resp, when+"-own", "")
	}
	push("pending", "pr3", "pr13")
	bootstrapNow(t, e.d)
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)
	push("served", "pr4", "pr13")
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 500, r)
	requireScopeTable(t, r, "user:u1", "pm_tasks", rowsOf(t, e.d, pmTasks, "u1"))
	e.requireConverged(t, r, "user:u1")
}
