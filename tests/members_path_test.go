package tests

// Members rules that reach their membership relation through a path: the
// members of the row the path reaches (tasks visible to every member of their
// project). Registration, materialization of every step that changes a
// membership (against the rule evaluated over the live tables), pull, and the
// push write policy.

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// impactMembersPathSetup: tasks scoped by the members of their project (one
// step, column named), notes by the members of their project's team (two
// steps, column found by its foreign key). The steps declare their references
// (no foreign keys), so projects and teams may be deleted and re-inserted.
const impactMembersPathSetup = `CREATE SCHEMA app;
	CREATE TABLE app.teams (id text PRIMARY KEY, name text);
	CREATE TABLE app.projects (id bigint PRIMARY KEY, team_id text);
	CREATE TABLE app.project_members (id bigint PRIMARY KEY, project_id bigint REFERENCES app.projects ON DELETE SET NULL, user_id text);
	CREATE TABLE app.team_members (id bigint PRIMARY KEY, team_id text REFERENCES app.teams ON DELETE SET NULL, user_id text);
	CREATE TABLE app.tasks (id int PRIMARY KEY, project_id bigint, title text);
	CREATE TABLE app.notes (id text PRIMARY KEY, project_id bigint, body text);
	SELECT synchro.register_table('app.tasks', '{"kind":"members","path":[{"column":"project_id","references":"app.projects"}],
		"relation":"app.project_members","column":"project_id","template":"user:{user_id}"}');
	SELECT synchro.register_table('app.notes', '{"kind":"members","path":[{"column":"project_id","references":"app.projects"},
		{"column":"team_id","references":"app.teams"}],"relation":"app.team_members","template":"member:{user_id}"}')`

// impactMembersPathLive evaluates both rules over the live tables: the row the
// path reaches must exist.
const impactMembersPathLive = `
	SELECT DISTINCT 'user:' || m.user_id, s.table_id, t.id::text FROM app.tasks t
	JOIN app.projects p ON p.id = t.project_id JOIN app.project_members m ON m.project_id = p.id
	JOIN synchro.synced_table s ON s.name = 'tasks' WHERE m.user_id IS NOT NULL
	UNION SELECT DISTINCT 'member:' || m.user_id, s.table_id, n.id FROM app.notes n
	JOIN app.projects p ON p.id = n.project_id JOIN app.teams tm ON tm.id = p.team_id
	JOIN app.team_members m ON m.team_id = tm.id
	JOIN synchro.synced_table s ON s.name = 'notes' WHERE m.user_id IS NOT NULL`

var impactMembersPathWorkload = []string{
	`INSERT INTO app.teams VALUES ('t1', 'one'), ('t2', 'two');
	 INSERT INTO app.projects VALUES (1, 't1'), (2, 't2'), (3, 't1');
	 INSERT INTO app.tasks SELECT i, 1 + i % 3, 't' || i FROM generate_series(1, 9) i;
	 INSERT INTO app.notes VALUES ('n1', 1, 'x'), ('n2', 2, 'x'), ('n3', 3, 'x'), ('n4', 9, 'no project');
	 INSERT INTO app.project_members VALUES (1, 1, 'u1'), (2, 1, 'u2'), (3, 2, 'u3');
	 INSERT INTO app.team_members VALUES (1, 't1', 'u4'), (2, 't2', 'u5')`,
	// A member joins: the project's tasks enter the user's scope.
	`INSERT INTO app.project_members VALUES (4, 2, 'u1')`,
	// A member leaves.
	`DELETE FROM app.project_members WHERE id = 2`,
	// The membership's user changes.
	`UPDATE app.project_members SET user_id = 'u6' WHERE id = 3`,
	// The membership moves to another project.
	`UPDATE app.project_members SET project_id = 3 WHERE id = 1`,
	// A task moves to another project (the synced row's path column).
	`UPDATE app.tasks SET project_id = 2 WHERE id = 1`,
	// A step's relation changes: the project moves to another team.
	`UPDATE app.projects SET team_id = 't2' WHERE id = 1`,
	// The row a path reaches is deleted (its memberships set NULL), then inserted again.
	`DELETE FROM app.projects WHERE id = 3`,
	`INSERT INTO app.projects VALUES (3, 't1')`,
	// The membership relation of the two-step rule.
	`INSERT INTO app.team_members VALUES (3, 't2', 'u7')`,
	`UPDATE app.team_members SET team_id = 't1' WHERE id = 3`,
	// Project, task and membership together, membership first.
	`INSERT INTO app.project_members VALUES (5, NULL, 'u8');
	 INSERT INTO app.projects VALUES (4, 't2');
	 UPDATE app.project_members SET project_id = 4 WHERE id = 5;
	 INSERT INTO app.tasks VALUES (20, 4, 'new')`,
	// A task without a project, then given one.
	`INSERT INTO app.tasks VALUES (21, NULL, 'loose')`,
	`UPDATE app.tasks SET project_id = 4 WHERE id = 21`,
	// A member removed and the task moved in one transaction.
	`DELETE FROM app.project_members WHERE id = 4; UPDATE app.tasks SET project_id = 3 WHERE id = 2`,
}

// TestImpactMembersPath: every step that changes what a members rule with a
// path reads (the synced row's path column, a step relation's row, a
// membership row's user or column, inserts and deletes) re-evaluates exactly
// the affected synced rows: each transaction's effects are the net diff of
// the open membership, which equals the rules evaluated over the live rows;
// one batch gives the same state as one transaction at a time.
func TestImpactMembersPath(t *testing.T) {
	t.Parallel()
	a := impactStart(t, impactMembersPathSetup, "", impactMembersPathLive)
	for i, sql := range impactMembersPathWorkload {
		impactStep(t, a, impactMembersPathLive, sql)
		if i == 1 {
			// u1 joined project 2: its tasks 1, 4 and 7, nothing else.
			got := rowsOf(t, a, `SELECT key FROM synchro.membership m JOIN synchro.synced_table s USING (table_id)
				WHERE s.name = 'tasks' AND m.scope = 'user:u1' AND m.to_lsn IS NULL ORDER BY key::int`)
			if want := []string{"1", "3", "4", "6", "7", "9"}; !slices.Equal(got, want) {
				t.Fatalf("tasks in user:u1 after joining project 2: %v, want %v", got, want)
			}
		}
	}
	if n := queryInt(t, a, `SELECT count(*) FROM synchro.membership WHERE to_lsn IS NULL AND scope LIKE 'member:%'`); n == 0 {
		t.Fatal("the two-step rule put no note in any scope")
	}

	b := testdb.New(t)
	b.Exec(t, impactMembersPathSetup)
	materializeInOneBatch(t, b, startStreaming(t, b, workerConfig(b, "wb")), impactMembersPathWorkload)
	impactCheck(t, b, impactMembersPathLive)
	requireSameState(t, "one-by-one vs one batch", materializedState(t, a), materializedState(t, b))
}

// TestRegistryMembersPath: a members rule with a path registers the step
// relations and the membership relation as dependencies, stores the path
// normalized, and its rule reads both (synchro.rule_read).
func TestRegistryMembersPath(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.projects (id text PRIMARY KEY, name text);
		CREATE TABLE app.project_members (id int PRIMARY KEY, project_id text REFERENCES app.projects, user_id text);
		CREATE TABLE app.tasks (id text PRIMARY KEY, project_id text REFERENCES app.projects, title text)`)
	registerTable(t, d, "app.tasks", `{"kind":"members","path":["project_id"],"relation":"app.project_members","template":"user:{user_id}"}`,
		`{"exclude_columns":["project_id"]}`)
	requireCaptured(t, d, "app.projects")
	requireCaptured(t, d, "app.project_members")
	if got := queryText(t, d, `SELECT scope_rule #>> '{path,0,relation}' || ' ' || (scope_rule ->> 'column')
		FROM synchro.synced_table WHERE name = 'tasks'`); got != "app.projects project_id" {
		t.Fatalf("normalized rule: step relation and column %q", got)
	}
	if got := rowsOf(t, d, `SELECT r.relation_name FROM synchro.rule_read rr JOIN synchro.relation r USING (relation_id)
		ORDER BY 1`); !slices.Equal(got, []string{"project_members", "projects"}) {
		t.Fatalf("rule_read: %v", got)
	}
	// The path column is captured although it is not synced.
	if got := queryText(t, d, `SELECT r.columns::text FROM synchro.relation r WHERE r.relation_name = 'tasks'`); got != "{id,title,project_id}" && got != "{id,project_id,title}" {
		t.Fatalf("captured columns of app.tasks: %s", got)
	}
}

// TestRegistrationRefusesBadMembersPath: a members rule's path is checked as a
// path rule's is, its column must reference the key of the relation the path
// reaches, and the relations it would register must be empty.
func TestRegistrationRefusesBadMembersPath(t *testing.T) {
	const tables = `CREATE TABLE app.projects (id text PRIMARY KEY, name text);
		CREATE TABLE app.tasks (id text PRIMARY KEY, project_id text REFERENCES app.projects, title text, parent_id text);
		CREATE TABLE app.project_members (id int PRIMARY KEY, project_id text REFERENCES app.projects,
			task_id text REFERENCES app.tasks, user_id text);
		CREATE TABLE app.task_members (id int PRIMARY KEY, task_id text REFERENCES app.tasks, user_id text);`
	reg := func(rule string) string {
		return `SELECT synchro.register_table('app.tasks', '{"kind":"members",` + rule + `,"template":"user:{user_id}"}')`
	}
	runRejectCases(t, []rejectCase{
		{
			name: "unknown path column", setup: tables,
			call:  reg(`"path":["proj"],"relation":"app.project_members","column":"project_id"`),
			state: stateUndefinedColumn, relation: "app.tasks", rule: `members scope_rule path names unknown column "proj"`,
		},
		{
			name: "path column without a foreign key", setup: tables,
			call:  reg(`"path":["title"],"relation":"app.project_members","column":"project_id"`),
			state: stateInvalidParameterValue, relation: "app.tasks",
			rule: `members scope_rule path column "title" of app.tasks has 0 single-column foreign keys; name the target with {"column": ..., "references": "schema.table"}`,
		},
		{
			name: "empty path", setup: tables,
			call:  reg(`"path":[],"relation":"app.project_members","column":"project_id"`),
			state: stateInvalidParameterValue, relation: "app.tasks", rule: `members scope_rule path needs a non-empty "path" array`,
		},
		{
			name: "path back to the table", setup: tables,
			call:  reg(`"path":[{"column":"parent_id","references":"app.tasks"}],"relation":"app.task_members","column":"task_id"`),
			state: stateInvalidParameterValue, relation: "app.tasks", rule: `members scope_rule path may not return to the table itself`,
		},
		{
			name: "column references the synced table, not the relation the path reaches", setup: tables,
			call:  reg(`"path":["project_id"],"relation":"app.project_members","column":"task_id"`),
			state: stateInvalidParameterValue, relation: "app.tasks",
			rule: `members scope_rule column "task_id" of app.project_members must be a single-column foreign key to the primary key of app.projects, but it references app.tasks (id)`,
		},
		{
			name: "no column and no foreign key to the relation the path reaches", setup: tables,
			call:  reg(`"path":["project_id"],"relation":"app.task_members"`),
			state: stateInvalidParameterValue, relation: "app.tasks",
			rule: `members relation app.task_members has 0 single-column foreign keys to app.projects (the relation the path reaches); name the referencing "column"`,
		},
		{
			name: "unknown membership column", setup: tables,
			call:  reg(`"path":["project_id"],"relation":"app.project_members","column":"projectid"`),
			state: stateUndefinedColumn, relation: "app.project_members", rule: `members scope_rule column names unknown column "projectid"`,
		},
		{
			name: "template over the relation the path reaches", setup: tables,
			call:  `SELECT synchro.register_table('app.tasks', '{"kind":"members","path":["project_id"],"relation":"app.project_members","template":"p:{name}"}')`,
			state: stateUndefinedColumn, relation: "app.project_members", rule: `members scope_rule template names unknown column "name"`,
		},
	})
}

// membersPathSyncSchema: tasks visible to every member of their project;
// project_members is synced too (each user sees their own memberships), and
// projects is the dependency the path reaches.
const membersPathSyncSchema = `CREATE SCHEMA app;
	CREATE TABLE app.projects (id text PRIMARY KEY, name text);
	CREATE TABLE app.project_members (id text PRIMARY KEY, project_id text NOT NULL REFERENCES app.projects, user_id text NOT NULL);
	CREATE TABLE app.tasks (id text PRIMARY KEY, project_id text REFERENCES app.projects, title text);
	SELECT synchro.register_table('app.project_members', '{"kind":"column","template":"user:{user_id}"}');
	SELECT synchro.register_table('app.tasks', '{"kind":"members","path":["project_id"],"relation":"app.project_members",
		"column":"project_id","template":"user:{user_id}"}')`

const membersPathSyncSeed = `INSERT INTO app.projects VALUES ('p1', 'one'), ('p2', 'two');
	INSERT INTO app.project_members VALUES ('m1', 'p1', 'alice'), ('m2', 'p1', 'bob'), ('m3', 'p2', 'carol');
	INSERT INTO app.tasks VALUES ('t1', 'p1', 'a'), ('t2', 'p1', 'b'), ('t3', 'p2', 'c')`

// newMembersPathEnv is a syncEnv over membersPathSyncSchema (not syncSchema),
// seeded and materialized.
func newMembersPathEnv(t *testing.T) *syncEnv {
	t.Helper()
	d := testdb.New(t)
	d.Exec(t, membersPathSyncSchema)
	cfg := workerConfig(d, "members-path")
	w := startStreaming(t, d, cfg)
	d.Exec(t, membersPathSyncSeed)
	waitMaterialized(t, d)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	e := &syncEnv{d: d, cfg: cfg, w: w, url: serveSync(t, d)}
	waitCaptureReady(t, d)
	return e
}

// membersPathPull pulls the replica of user's client and returns the
// delivered changes as "scope|table/pk|op", sorted, versions left out.
func membersPathPull(t *testing.T, e *syncEnv, user, client string, r *replica) []string {
	t.Helper()
	delivered, _ := e.pagingPull(t, user, client, 2, r)
	var out []string
	for _, d := range delivered {
		out = append(out, d[:strings.LastIndex(d, "|")])
	}
	sort.Strings(out)
	return out
}

func membersPathTask(id string) string { return rowKey("tasks", map[string]any{"id": id}) }

func membersPathMember(id string) string { return rowKey("project_members", map[string]any{"id": id}) }

// TestSyncMembersPathPull: tasks reach every member of their project; a
// member added or removed by a direct write moves the project's tasks into or
// out of that user's scope at the next pull, a task moved to another project
// leaves the old project's members and reaches the new one's, and every
// replica's checksums match the server's.
func TestSyncMembersPathPull(t *testing.T) {
	e := newMembersPathEnv(t)
	users := []string{"alice", "bob", "carol"}
	replicas := map[string]*replica{}
	for _, u := range users {
		e.connect(t, u, "c-"+u)
		replicas[u] = newReplica()
		e.rebuildScope(t, u, "c-"+u, "user:"+u, 1, replicas[u])
		e.requireConverged(t, replicas[u], "user:"+u)
	}
	held := func(u string) []string {
		var ks []string
		for k := range replicas[u].rows["user:"+u] {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	sorted := func(ks ...string) []string { sort.Strings(ks); return ks }
	if got, want := held("alice"), sorted(membersPathMember("m1"), membersPathTask("t1"), membersPathTask("t2")); !slices.Equal(got, want) {
		t.Fatalf("alice holds %v, want %v", got, want)
	}
	if got, want := held("carol"), sorted(membersPathMember("m3"), membersPathTask("t3")); !slices.Equal(got, want) {
		t.Fatalf("carol holds %v, want %v", got, want)
	}
	step := func(sql string, want map[string][]string) {
		t.Helper()
		e.d.Exec(t, sql)
		waitMaterialized(t, e.d)
		for _, u := range users {
			got := membersPathPull(t, e, u, "c-"+u, replicas[u])
			if w := sorted(want[u]...); !slices.Equal(got, w) {
				t.Fatalf("after %q, %s pulled %v, want %v", sql, u, got, w)
			}
			e.requireConverged(t, replicas[u], "user:"+u)
		}
	}

	// Alice joins p2: its task reaches her.
	step(`INSERT INTO app.project_members VALUES ('m4', 'p2', 'alice')`, map[string][]string{
		"alice": {"user:alice|" + membersPathMember("m4") + "|upsert", "user:alice|" + membersPathTask("t3") + "|upsert"}})
	// Alice leaves p1: its tasks leave her replica; Bob keeps them.
	step(`DELETE FROM app.project_members WHERE id = 'm1'`, map[string][]string{
		"alice": {"user:alice|" + membersPathMember("m1") + "|delete", "user:alice|" + membersPathTask("t1") + "|delete",
			"user:alice|" + membersPathTask("t2") + "|delete"}})
	// t2 moves from p1 (Bob) to p2 (Alice, Carol).
	step(`UPDATE app.tasks SET project_id = 'p2' WHERE id = 't2'`, map[string][]string{
		"alice": {"user:alice|" + membersPathTask("t2") + "|upsert"},
		"bob":   {"user:bob|" + membersPathTask("t2") + "|delete"},
		"carol": {"user:carol|" + membersPathTask("t2") + "|upsert"}})
	// A membership moved to another project: Carol's moves to p1.
	step(`UPDATE app.project_members SET project_id = 'p1' WHERE id = 'm3'`, map[string][]string{
		"carol": {"user:carol|" + membersPathMember("m3") + "|upsert", "user:carol|" + membersPathTask("t1") + "|upsert",
			"user:carol|" + membersPathTask("t2") + "|delete", "user:carol|" + membersPathTask("t3") + "|delete"}})
	if got, want := held("alice"), sorted(membersPathMember("m4"), membersPathTask("t2"), membersPathTask("t3")); !slices.Equal(got, want) {
		t.Fatalf("alice holds %v, want %v", got, want)
	}
}

// TestSyncPolicyMembersPath: under the default write policy a member of a
// task's project may write it, a non-member may not (an update or delete is
// answered as of a missing row; no insert into the project, nor a move a task of their own into the project, nor move the member's task
// out to a project they are not a member of); joining a project by pushing a
// membership row is refused, since it would give the user the project's
// tasks, which they could not write; a membership row that gives no new task
// a scope is accepted.
func TestSyncPolicyMembersPath(t *testing.T) {
	e := newMembersPathEnv(t)
	e.connect(t, "alice", "ca")
	e.connect(t, "carol", "cc")

	resp := e.push(t, "alice", "ca",
		mut("a1", "tasks", "update", map[string]any{"id": "t1"}, map[string]any{"title": "by alice"}),
		mut("a2", "tasks", "insert", map[string]any{"id": "t9"}, map[string]any{"project_id": "p1", "title": "new"}),
		// Out of p1 into p2, where Alice is no member.
		mut("a3", "tasks", "update", map[string]any{"id": "t2"}, map[string]any{"project_id": "p2"}),
		// A second membership of her own in p1 gives no task a new scope.
		mut("a4", "project_members", "insert", map[string]any{"id": "mA"}, map[string]any{"project_id": "p1", "user_id": "alice"}))
	requireOutcome(t, resp, "a1", "")
	requireOutcome(t, resp, "a2", "")
	requireOutcome(t, resp, "a3", "policy_rejected")
	requireOutcome(t, resp, "a4", "")

	resp = e.push(t, "carol", "cc",
		mut("c1", "tasks", "update", map[string]any{"id": "t1"}, map[string]any{"title": "by carol"}),
		mut("c2", "tasks", "insert", map[string]any{"id": "t10"}, map[string]any{"project_id": "p1", "title": "carol's"}),
		mut("c3", "tasks", "delete", map[string]any{"id": "t2"}, nil),
		mut("c4", "tasks", "update", map[string]any{"id": "t3"}, map[string]any{"project_id": "p1"}),
		// Joining p1 would give its tasks Carol's scope.
		mut("c5", "project_members", "insert", map[string]any{"id": "mC"}, map[string]any{"project_id": "p1", "user_id": "carol"}),
		mut("c6", "tasks", "update", map[string]any{"id": "t3"}, map[string]any{"title": "by carol"}))
	// A row outside the user's scopes is answered as a missing one.
	for _, id := range []string{"c1", "c3"} {
		if _, o := outcome(t, resp, id); o["code"] != "version_conflict" || o["message"] != "the row does not exist" || o["server_row"] != nil {
			t.Fatalf("mutation %s of a task carol may not see: %v", id, o)
		}
	}
	for _, id := range []string{"c2", "c4", "c5"} {
		requireOutcome(t, resp, id, "policy_rejected")
	}
	requireOutcome(t, resp, "c6", "")

	if got := rowsOf(t, e.d, `SELECT id || ':' || project_id || ':' || title FROM app.tasks ORDER BY id`); !slices.Equal(got,
		[]string{"t1:p1:by alice", "t2:p1:b", "t3:p2:by carol", "t9:p1:new"}) {
		t.Fatalf("tasks after the pushes: %v", got)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM app.project_members WHERE user_id = 'carol' AND project_id = 'p1'`); n != 0 {
		t.Fatalf("carol joined p1: %d memberships", n)
	}
	// The accepted writes are materialized into the members' scopes.
	waitMaterialized(t, e.d)
	r := newReplica()
	e.connect(t, "bob", "cb")
	e.rebuildScope(t, "bob", "cb", "user:bob", 10, r)
	e.requireConverged(t, r, "user:bob")
	if _, ok := r.rows["user:bob"][membersPathTask("t9")]; !ok {
		t.Fatalf("alice's new task t9 did not reach bob, a member of p1: %v", r.rows["user:bob"])
	}
}
