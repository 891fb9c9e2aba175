package tests

// Impacted-row materialization: transactions that change
// relations scope rules read (capture dependencies, synced tables read by other
// rules) together with the synced rows those rules point at. Every step is
// checked against an independent oracle: the scope rules evaluated over the
// live application tables (the projections equal them once everything is
// materialized), the net diff of the open membership before and after each
// transaction, effect ordinals, digests, effect versions, and a per-scope
// replay of every effect onto an empty replica.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// impactPathSetup: tasks -> projects -> owners and notes -> owners, path rules
// without foreign keys (so dependency rows may be deleted and re-inserted
// freely), int, bigint and text keys.
const impactPathSetup = `CREATE SCHEMA app;
	CREATE TABLE app.owners (id text PRIMARY KEY, user_id text);
	CREATE TABLE app.projects (id bigint PRIMARY KEY, owner_id text);
	CREATE TABLE app.tasks (id int PRIMARY KEY, project_id bigint, title text);
	CREATE TABLE app.notes (id text PRIMARY KEY, owner_id text, body text);
	SELECT synchro.register_table('app.tasks', '{"kind":"path","path":[{"column":"project_id","references":"app.projects"},{"column":"owner_id","references":"app.owners"}],"template":"user:{user_id}"}');
	SELECT synchro.register_table('app.notes', '{"kind":"path","path":[{"column":"owner_id","references":"app.owners"}],"template":"user:{user_id}"}');
	-- Published, not registered: decoded, no applicable event.
	CREATE TABLE app.plain (id int PRIMARY KEY);
	ALTER PUBLICATION synchro ADD TABLE app.plain`

// impactPathLive evaluates the path rules over the live tables.
const impactPathLive = `
	SELECT 'user:' || o.user_id, s.table_id, t.id::text FROM app.tasks t
	JOIN app.projects p ON p.id = t.project_id JOIN app.owners o ON o.id = p.owner_id
	JOIN synchro.synced_table s ON s.name = 'tasks' WHERE o.user_id IS NOT NULL
	UNION SELECT 'user:' || o.user_id, s.table_id, n.id FROM app.notes n
	JOIN app.owners o ON o.id = n.owner_id JOIN synchro.synced_table s ON s.name = 'notes' WHERE o.user_id IS NOT NULL`

const impactPathSeed = `INSERT INTO app.owners VALUES ('o1', 'u1'), ('o2', 'u2'), ('o3', 'u3');
	INSERT INTO app.projects VALUES (1, 'o1'), (2, 'o2'), (3, 'o3');
	INSERT INTO app.tasks SELECT i, 1 + i % 3, 't' || i FROM generate_series(1, 12) i;
	INSERT INTO app.notes VALUES ('n1', 'o1', 'x'), ('N1', 'o1', 'x'), ('n10', 'o2', 'x'), ('n2', 'o3', 'x')`

// impactMembersSetup: docs scoped by a members relation.
const impactMembersSetup = `CREATE SCHEMA app;
	CREATE TABLE app.docs (id int PRIMARY KEY, title text);
	CREATE TABLE app.doc_members (id bigint PRIMARY KEY, doc_id int REFERENCES app.docs ON DELETE SET NULL, user_id text);
	SELECT synchro.register_table('app.docs', '{"kind":"members","relation":"app.doc_members","column":"doc_id","template":"user:{user_id}"}')`

const impactMembersLive = `
	SELECT DISTINCT 'user:' || m.user_id, s.table_id, d.id::text FROM app.docs d
	JOIN app.doc_members m ON m.doc_id = d.id JOIN synchro.synced_table s ON s.name = 'docs' WHERE m.user_id IS NOT NULL`

// impactSyncedReadSetup: pages follow notebooks, a synced table with its own
// column rule; the rule of pages reads a synced table.
const impactSyncedReadSetup = `CREATE SCHEMA app;
	CREATE TABLE app.notebooks (id text PRIMARY KEY, owner text, title text);
	CREATE TABLE app.pages (id bigint PRIMARY KEY, notebook_id text REFERENCES app.notebooks DEFERRABLE INITIALLY DEFERRED, body text);
	SELECT synchro.register_table('app.notebooks', '{"kind":"column","template":"user:{owner}"}');
	SELECT synchro.register_table('app.pages', '{"kind":"path","path":["notebook_id"],"template":"user:{owner}"}')`

const impactSyncedReadLive = `
	SELECT 'user:' || n.owner, s.table_id, n.id FROM app.notebooks n JOIN synchro.synced_table s ON s.name = 'notebooks' WHERE n.owner IS NOT NULL
	UNION SELECT 'user:' || n.owner, s.table_id, p.id::text FROM app.pages p JOIN app.notebooks n ON n.id = p.notebook_id
	JOIN synchro.synced_table s ON s.name = 'pages' WHERE n.owner IS NOT NULL`

// impactSQLSetup: docs scoped by a custom rule over an acl relation.
const impactSQLSetup = `CREATE SCHEMA app;
	CREATE TABLE app.acl (id int PRIMARY KEY, team text);
	CREATE TABLE app.docs (id int PRIMARY KEY, acl_id int, title text);
	SELECT synchro.register_table('app.docs', '{"kind":"sql",
		"membership":"SELECT ''team:'' || (a.image->>''team'') FROM synchro.projected(''app.acl'') a WHERE a.key = $1->>''acl_id''",
		"impacts":{"app.acl":"SELECT d.key FROM synchro.projected(''app.docs'') d WHERE d.image->>''acl_id'' = $1->>''id''"}}')`

const impactSQLLive = `
	SELECT 'team:' || a.team, s.table_id, d.id::text FROM app.docs d JOIN app.acl a ON a.id = d.acl_id
	JOIN synchro.synced_table s ON s.name = 'docs' WHERE a.team IS NOT NULL`

// impactOpen returns the open membership as scope -> "table:key" -> current version.
func impactOpen(t *testing.T, d *testdb.DB) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, r := range rowsOf(t, d, `SELECT m.scope, m.table_id, m.key, coalesce(s.version, '<none>')
		FROM synchro.membership m LEFT JOIN synchro.synced_row s USING (table_id, key) WHERE m.to_lsn IS NULL`) {
		p := strings.SplitN(r, "|", 4)
		if out[p[0]] == nil {
			out[p[0]] = map[string]string{}
		}
		out[p[0]][p[1]+":"+p[2]] = p[3]
	}
	return out
}

func impactSorted(rows []string) []string {
	rows = slices.Clone(rows)
	sort.Strings(rows)
	return rows
}

// impactCheck checks the whole materialized state of d against the live rules.
func impactCheck(t *testing.T, d *testdb.DB, live string) {
	t.Helper()
	want := impactSorted(rowsOf(t, d, live))
	got := impactSorted(rowsOf(t, d, `SELECT scope, table_id, key FROM synchro.membership WHERE to_lsn IS NULL`))
	if !slices.Equal(got, want) {
		t.Fatalf("open membership\n got %v\nwant %v (rules over live rows)", got, want)
	}
	// Effect ordinals: dense from 0 per (scope, commit, event), in (table_id,
	// typed key, operation) order.
	if bad := rowsOf(t, d, `
		SELECT e.scope, e.commit_lsn::text, e.event_ordinal, e.effect_ordinal, e.table_id, e.key, e.op, x.want
		FROM synchro.effect e JOIN (
			SELECT e2.ctid AS tid, row_number() OVER (PARTITION BY e2.scope, e2.commit_lsn, e2.event_ordinal
				ORDER BY e2.table_id, CASE WHEN r.key_type <> 'string' THEN e2.key::numeric END, e2.key COLLATE "C", e2.op = 'upsert') - 1 AS want
			FROM synchro.effect e2 JOIN synchro.synced_table st USING (table_id) JOIN synchro.relation r ON r.relation_id = st.relation_id) x
		ON x.tid = e.ctid WHERE e.effect_ordinal <> x.want`); len(bad) > 0 {
		t.Fatalf("effect ordinals out of (table_id, typed key, op) order (scope|commit|event|ordinal|table|key|op|want): %v", bad)
	}
	// One effect per (scope, transaction, row).
	if bad := rowsOf(t, d, `SELECT scope, commit_lsn::text, table_id, key, count(*) FROM synchro.effect
		GROUP BY 1, 2, 3, 4 HAVING count(*) > 1`); len(bad) > 0 {
		t.Fatalf("several effects for one row, scope and transaction: %v", bad)
	}
	// Every effect's event ordinal is an event of its transaction.
	if bad := rowsOf(t, d, `SELECT e.scope, e.commit_lsn::text, e.event_ordinal, e.key FROM synchro.effect e
		WHERE NOT EXISTS (SELECT FROM synchro.event_ledger l WHERE l.commit_lsn = e.commit_lsn AND l.event_ordinal = e.event_ordinal)`); len(bad) > 0 {
		t.Fatalf("effects at event ordinals that are not events of their transaction: %v", bad)
	}
	// Replaying every effect of each scope in delivery order onto an empty
	// replica gives the open membership at the current versions.
	replica := map[string]map[string]string{}
	for _, r := range rowsOf(t, d, `SELECT scope, table_id, key, op, coalesce(version, '') FROM synchro.effect
		ORDER BY scope COLLATE "C", commit_lsn, event_ordinal, effect_ordinal`) {
		p := strings.SplitN(r, "|", 5)
		if replica[p[0]] == nil {
			replica[p[0]] = map[string]string{}
		}
		k := p[1] + ":" + p[2]
		if p[3] == "upsert" {
			replica[p[0]][k] = p[4]
		} else {
			if _, ok := replica[p[0]][k]; !ok {
				t.Fatalf("scope %s: delete of %s, which the replica does not hold", p[0], k)
			}
			delete(replica[p[0]], k)
		}
	}
	open := impactOpen(t, d)
	for scope := range replica {
		if len(replica[scope]) == 0 {
			delete(replica, scope)
		}
	}
	if fmt.Sprint(replica) != fmt.Sprint(open) {
		t.Fatalf("replayed effects\n got %v\nwant %v (open membership at current versions)", replica, open)
	}
	requireEffectVersions(t, d)
	requireDigests(t, d)
}

// impactStep commits one transaction, waits until it is materialized, and checks
// that its effects are exactly the net diff of the open membership (joins and
// version changes upsert, leaves delete), then the whole state. It returns the
// commit LSN.
func impactStep(t *testing.T, d *testdb.DB, live, sql string) string {
	t.Helper()
	before := impactOpen(t, d)
	c := commitTxn(t, d, sql)
	waitMaterialized(t, d)
	commitLSN, _, _, _ := ledgerOf(t, d, c)
	after := impactOpen(t, d)
	var want []string
	for scope, rows := range after {
		for k, v := range rows {
			if old, ok := before[scope][k]; !ok || old != v {
				want = append(want, fmt.Sprintf("%s|%s|upsert|%s", scope, k, v))
			}
		}
	}
	for scope, rows := range before {
		for k := range rows {
			if _, ok := after[scope][k]; !ok {
				want = append(want, fmt.Sprintf("%s|%s|delete|", scope, k))
			}
		}
	}
	var got []string
	for _, e := range effects(t, d, commitLSN) {
		got = append(got, fmt.Sprintf("%s|%d:%s|%s|%s", e.scope, e.tableID, e.key, e.op, e.version))
	}
	if got, want := impactSorted(got), impactSorted(want); !slices.Equal(got, want) {
		t.Fatalf("effects of %q\n got %v\nwant %v (net membership diff)", sql, got, want)
	}
	impactCheck(t, d, live)
	return commitLSN
}

// impactEvents returns "scope|key|op" -> event ordinal of the effects at commitLSN.
func impactEvents(t *testing.T, d *testdb.DB, commitLSN string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range effects(t, d, commitLSN) {
		out[e.scope+"|"+e.key+"|"+e.op] = e.event
	}
	return out
}

func impactRequireEvent(t *testing.T, got map[string]int, what string, want int) {
	t.Helper()
	if ev, ok := got[what]; !ok || ev != want {
		t.Fatalf("effect %s: event ordinal %d (present %v), want %d; all: %v", what, ev, ok, want, got)
	}
}

func impactStart(t *testing.T, setup, seed, live string) *testdb.DB {
	t.Helper()
	d := testdb.New(t)
	d.Exec(t, setup)
	startStreaming(t, d, workerConfig(d, "w1"))
	if seed != "" {
		impactStep(t, d, live, seed)
	}
	return d
}

// TestImpactDependencyAndRowsOrders: one transaction changes a dependency
// row and the synced rows its rule points at, dependency first, synced rows
// first, interleaved, and with the dependency changed twice and back.
func TestImpactDependencyAndRowsOrders(t *testing.T) {
	t.Parallel()
	d := impactStart(t, impactPathSetup, impactPathSeed, impactPathLive)
	// Dependency first: o1 moves to u4, then task 3 (project 1) and note n1 change.
	lsn := impactStep(t, d, impactPathLive, `UPDATE app.owners SET user_id = 'u4' WHERE id = 'o1';
		UPDATE app.tasks SET title = 'changed' WHERE id = 3;
		UPDATE app.notes SET owner_id = 'o2' WHERE id = 'n1'`)
	ev := impactEvents(t, d, lsn)
	impactRequireEvent(t, ev, "user:u4|3|upsert", 1)  // own change after the dependency
	impactRequireEvent(t, ev, "user:u4|6|upsert", 0)  // moved by the dependency only
	impactRequireEvent(t, ev, "user:u2|n1|upsert", 2) // own move
	impactRequireEvent(t, ev, "user:u1|N1|delete", 0) // moved by the dependency
	impactRequireEvent(t, ev, "user:u1|n1|delete", 2) // later of the two
	// Synced rows first, then the dependency.
	lsn = impactStep(t, d, impactPathLive, `UPDATE app.tasks SET project_id = 2 WHERE id = 3;
		UPDATE app.tasks SET title = 'y' WHERE id = 6;
		UPDATE app.projects SET owner_id = 'o3' WHERE id = 2`)
	ev = impactEvents(t, d, lsn)
	impactRequireEvent(t, ev, "user:u3|3|upsert", 2)
	impactRequireEvent(t, ev, "user:u4|3|delete", 2)
	impactRequireEvent(t, ev, "user:u4|6|upsert", 1)
	// Interleaved: dependency, row, dependency again, row back.
	impactStep(t, d, impactPathLive, `UPDATE app.owners SET user_id = 'u5' WHERE id = 'o3';
		UPDATE app.tasks SET project_id = 1 WHERE id = 9;
		UPDATE app.projects SET owner_id = 'o1' WHERE id = 3;
		UPDATE app.tasks SET project_id = 3 WHERE id = 9;
		UPDATE app.notes SET owner_id = 'o3' WHERE id = 'n2'`)
	// Dependency changed twice and back: no move, only the own change of task 4.
	lsn = impactStep(t, d, impactPathLive, `UPDATE app.owners SET user_id = 'u9' WHERE id = 'o2';
		UPDATE app.tasks SET title = 'four' WHERE id = 4;
		UPDATE app.owners SET user_id = 'u8' WHERE id = 'o2';
		UPDATE app.owners SET user_id = 'u2' WHERE id = 'o2'`)
	if got := effects(t, d, lsn); len(got) != 1 || got[0].key != "4" || got[0].op != "upsert" {
		t.Fatalf("dependency changed and back: effects %v, want only the upsert of task 4", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.scope_digest WHERE commit_lsn = $1::pg_lsn`, lsn); n != 1 {
		t.Fatalf("%d scope digests at a transaction that changed one scope", n)
	}
}

// TestImpactJoinAndLeaveWithinTransaction: rows that join a scope and
// leave it again within one transaction (through dependencies) yield nothing
// for that scope.
func TestImpactJoinAndLeaveWithinTransaction(t *testing.T) {
	t.Parallel()
	d := impactStart(t, impactPathSetup, impactPathSeed, impactPathLive)
	lsn := impactStep(t, d, impactPathLive, `UPDATE app.owners SET user_id = 'u7' WHERE id = 'o1';
		UPDATE app.tasks SET project_id = 2 WHERE id = 3;
		UPDATE app.owners SET user_id = 'u1' WHERE id = 'o1';
		UPDATE app.projects SET owner_id = 'o3' WHERE id = 2;
		UPDATE app.projects SET owner_id = 'o2' WHERE id = 2;
		INSERT INTO app.owners VALUES ('o7', 'u7');
		UPDATE app.notes SET owner_id = 'o7' WHERE id = 'n10';
		UPDATE app.notes SET owner_id = 'o2' WHERE id = 'n10';
		DELETE FROM app.owners WHERE id = 'o7'`)
	for _, e := range effects(t, d, lsn) {
		if e.scope == "user:u7" || e.scope == "user:u3" {
			t.Fatalf("effect %v in a scope joined and left within the transaction", e)
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope IN ('user:u7', 'user:u3') AND from_lsn = $1::pg_lsn`, lsn); n != 0 {
		t.Fatalf("%d edges opened in scopes joined and left within the transaction", n)
	}
}

// TestImpactDependencyDeletedAndReinserted: dependency rows deleted and
// inserted again with other values in one transaction (path and members rules),
// and inserted and deleted in one transaction.
func TestImpactDependencyDeletedAndReinserted(t *testing.T) {
	t.Parallel()
	d := impactStart(t, impactPathSetup, impactPathSeed, impactPathLive)
	impactStep(t, d, impactPathLive, `DELETE FROM app.owners WHERE id = 'o1'; INSERT INTO app.owners VALUES ('o1', 'u6')`)
	impactStep(t, d, impactPathLive, `DELETE FROM app.projects WHERE id = 2; INSERT INTO app.projects VALUES (2, 'o3');
		DELETE FROM app.owners WHERE id = 'o3'; INSERT INTO app.owners VALUES ('o3', NULL)`)
	impactStep(t, d, impactPathLive, `DELETE FROM app.owners WHERE id = 'o3'; INSERT INTO app.owners VALUES ('o3', 'u3')`)
	// Dependency deleted: rows fall out of every scope; re-inserted later.
	impactStep(t, d, impactPathLive, `DELETE FROM app.projects WHERE id = 1`)
	impactStep(t, d, impactPathLive, `INSERT INTO app.projects VALUES (1, 'o2'); DELETE FROM app.projects WHERE id = 1;
		INSERT INTO app.projects VALUES (1, 'o3')`)

	m := impactStart(t, impactMembersSetup, `INSERT INTO app.docs SELECT i, 'd' || i FROM generate_series(1, 5) i;
		INSERT INTO app.doc_members VALUES (1, 1, 'u1'), (2, 2, 'u1'), (3, 2, 'u2'), (4, 3, 'u3'), (5, 1, 'u1')`, impactMembersLive)
	// A duplicate membership removed: doc 1 stays in user:u1.
	lsn := impactStep(t, m, impactMembersLive, `DELETE FROM app.doc_members WHERE id = 1`)
	if got := effects(t, m, lsn); len(got) != 0 {
		t.Fatalf("removing a duplicate membership made effects %v", got)
	}
	impactStep(t, m, impactMembersLive, `DELETE FROM app.doc_members WHERE id = 3; INSERT INTO app.doc_members VALUES (3, 4, 'u2')`)
	impactStep(t, m, impactMembersLive, `DELETE FROM app.doc_members WHERE id = 2; INSERT INTO app.doc_members VALUES (2, 2, 'u9');
		UPDATE app.doc_members SET doc_id = 5 WHERE id = 2; UPDATE app.doc_members SET doc_id = 2 WHERE id = 2`)
	impactStep(t, m, impactMembersLive, `INSERT INTO app.doc_members VALUES (10, 3, 'u8'); DELETE FROM app.doc_members WHERE id = 10;
		UPDATE app.docs SET title = 'x' WHERE id = 3`)
	impactStep(t, m, impactMembersLive, `UPDATE app.doc_members SET user_id = NULL WHERE id = 4; UPDATE app.doc_members SET doc_id = 1 WHERE id = 5`)
}

// TestImpactMovedRowDeletedOrInserted: a synced row the dependency change
// moves is itself deleted in the same transaction; a row inserted in the same
// transaction as its dependency; a row deleted and re-inserted while moved.
func TestImpactMovedRowDeletedOrInserted(t *testing.T) {
	t.Parallel()
	d := impactStart(t, impactPathSetup, impactPathSeed, impactPathLive)
	lsn := impactStep(t, d, impactPathLive, `UPDATE app.owners SET user_id = 'u4' WHERE id = 'o1'; DELETE FROM app.tasks WHERE id = 3`)
	ev := impactEvents(t, d, lsn)
	impactRequireEvent(t, ev, "user:u1|3|delete", 1)
	if _, ok := ev["user:u4|3|upsert"]; ok {
		t.Fatalf("deleted task 3 upserted in the owner's new scope")
	}
	impactStep(t, d, impactPathLive, `DELETE FROM app.tasks WHERE id = 6; UPDATE app.owners SET user_id = 'u1' WHERE id = 'o1'`)
	impactStep(t, d, impactPathLive, `INSERT INTO app.tasks VALUES (100, 10, 'new'); INSERT INTO app.projects VALUES (10, 'o10');
		INSERT INTO app.owners VALUES ('o10', 'u10'); INSERT INTO app.notes VALUES ('n100', 'o10', 'b')`)
	impactStep(t, d, impactPathLive, `UPDATE app.owners SET user_id = 'u11' WHERE id = 'o10'; DELETE FROM app.tasks WHERE id = 100;
		INSERT INTO app.tasks VALUES (100, 10, 'again')`)
	impactStep(t, d, impactPathLive, `DELETE FROM app.tasks WHERE id = 100; UPDATE app.projects SET owner_id = 'o1' WHERE id = 10;
		INSERT INTO app.tasks VALUES (100, 10, 'third'); DELETE FROM app.notes WHERE id = 'n100'; DELETE FROM app.owners WHERE id = 'o10'`)
	impactStep(t, d, impactPathLive, `DELETE FROM app.projects WHERE id = 10; DELETE FROM app.tasks WHERE id = 100`)
}

// TestImpactHotDependencyDeterministic: one dependency key that hundreds of
// rows point at moves them all at once; two identical runs give identical
// effects and ordinals.
func TestImpactHotDependencyDeterministic(t *testing.T) {
	t.Parallel()
	workload := []string{
		`INSERT INTO app.owners VALUES ('o1', 'u1'), ('o2', 'u2');
		 INSERT INTO app.projects VALUES (1, 'o1'), (2, 'o2');
		 INSERT INTO app.tasks SELECT i, 1, 't' || i FROM generate_series(1, 400) i;
		 INSERT INTO app.notes SELECT 'n' || i, 'o1', 'b' FROM generate_series(1, 150) i`,
		`UPDATE app.owners SET user_id = 'u3' WHERE id = 'o1'`,
		`UPDATE app.tasks SET title = 'z' WHERE id % 7 = 0; UPDATE app.projects SET owner_id = 'o2' WHERE id = 1;
		 DELETE FROM app.tasks WHERE id % 11 = 0; INSERT INTO app.tasks SELECT i, 1, 'late' FROM generate_series(401, 420) i`,
		`UPDATE app.owners SET user_id = 'u1' WHERE id = 'o2'; UPDATE app.owners SET user_id = 'u1' WHERE id = 'o1'`,
	}
	var states []map[string][]string
	for run := 0; run < 2; run++ {
		d := impactStart(t, impactPathSetup, "", impactPathLive)
		for _, sql := range workload {
			impactStep(t, d, impactPathLive, sql)
		}
		if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope = 'user:u1' AND to_lsn IS NULL`); n < 500 {
			t.Fatalf("user:u1 holds %d rows at the end", n)
		}
		states = append(states, materializedState(t, d))
	}
	// Versions are opaque and differ between runs; the rest must not.
	requireSameState(t, "two identical runs", states[0], states[1])
}

// impactBatchWorkload mixes transactions that touch relations rules read (each a
// segment of its own) with ones that do not (cut into multi-transaction segments).
var impactBatchWorkload = []string{
	`UPDATE app.tasks SET title = 'a' WHERE id = 1`,
	`UPDATE app.tasks SET project_id = 2 WHERE id = 1; UPDATE app.notes SET body = 'q' WHERE id = 'n1'`,
	`UPDATE app.owners SET user_id = 'u5' WHERE id = 'o2'`,
	`UPDATE app.tasks SET title = 'b' WHERE id = 1`,
	`UPDATE app.tasks SET project_id = 3 WHERE id = 1; DELETE FROM app.tasks WHERE id = 2`,
	`INSERT INTO app.tasks VALUES (2, 2, 'back')`,
	`UPDATE app.projects SET owner_id = 'o1' WHERE id = 2; UPDATE app.tasks SET title = 'c' WHERE id = 2`,
	`UPDATE app.projects SET owner_id = 'o2' WHERE id = 3`,
	`UPDATE app.tasks SET project_id = 2 WHERE id = 1`,
	`UPDATE app.tasks SET project_id = 3 WHERE id = 1`,
	`DELETE FROM app.tasks WHERE id = 1`,
	`INSERT INTO app.tasks VALUES (1, 1, 'again')`,
	`UPDATE app.owners SET user_id = 'u1' WHERE id = 'o2'; UPDATE app.owners SET user_id = 'u2' WHERE id = 'o2'`,
	`UPDATE app.notes SET owner_id = 'o3' WHERE id = 'n1'`,
	`DELETE FROM app.owners WHERE id = 'o3'`,
	`UPDATE app.notes SET body = 'orphan' WHERE id = 'n1'`,
	`INSERT INTO app.owners VALUES ('o3', 'u7')`,
	`UPDATE app.notes SET body = 'adopted' WHERE id = 'n1'; UPDATE app.tasks SET title = 'd' WHERE id = 3`,
	`INSERT INTO app.plain VALUES (1)`,
	`UPDATE app.tasks SET title = 'e' WHERE id = 3`,
}

// TestImpactBatchMatchesOneByOne: the mixed workload materialized one
// transaction at a time and in a single batch gives the same state.
func TestImpactBatchMatchesOneByOne(t *testing.T) {
	t.Parallel()
	a := impactStart(t, impactPathSetup, impactPathSeed, impactPathLive)
	for _, sql := range impactBatchWorkload {
		impactStep(t, a, impactPathLive, sql)
	}

	b := testdb.New(t)
	b.Exec(t, impactPathSetup)
	first := startStreaming(t, b, workerConfig(b, "wb"))
	commitTxn(t, b, impactPathSeed)
	waitMaterialized(t, b)
	materializeInOneBatch(t, b, first, impactBatchWorkload)
	impactCheck(t, b, impactPathLive)
	requireSameState(t, "one-by-one vs one batch", materializedState(t, a), materializedState(t, b))
}

// TestImpactRuleReadsSyncedTable: pages follow their notebook, a synced
// table with its own rule, changed in the same transactions as the pages.
func TestImpactRuleReadsSyncedTable(t *testing.T) {
	t.Parallel()
	d := impactStart(t, impactSyncedReadSetup, `INSERT INTO app.notebooks VALUES ('b1', 'u1', 'one'), ('b2', 'u2', 'two');
		INSERT INTO app.pages SELECT i, CASE WHEN i % 2 = 0 THEN 'b1' ELSE 'b2' END, 'p' FROM generate_series(1, 10) i`, impactSyncedReadLive)
	lsn := impactStep(t, d, impactSyncedReadLive, `UPDATE app.pages SET body = 'x' WHERE id = 2;
		UPDATE app.notebooks SET owner = 'u3' WHERE id = 'b1';
		UPDATE app.pages SET notebook_id = 'b1' WHERE id = 3`)
	ev := impactEvents(t, d, lsn)
	impactRequireEvent(t, ev, "user:u3|b1|upsert", 1)
	impactRequireEvent(t, ev, "user:u3|2|upsert", 1)
	impactRequireEvent(t, ev, "user:u3|3|upsert", 2)
	impactRequireEvent(t, ev, "user:u3|4|upsert", 1)
	impactStep(t, d, impactSyncedReadLive, `INSERT INTO app.pages VALUES (50, 'b9', 'new'); INSERT INTO app.notebooks VALUES ('b9', 'u9', 'nine');
		UPDATE app.notebooks SET owner = 'u1' WHERE id = 'b2'; UPDATE app.notebooks SET owner = 'u2' WHERE id = 'b2'`)
	impactStep(t, d, impactSyncedReadLive, `DELETE FROM app.pages WHERE notebook_id = 'b9'; DELETE FROM app.notebooks WHERE id = 'b9';
		UPDATE app.notebooks SET owner = NULL WHERE id = 'b2'`)
	impactStep(t, d, impactSyncedReadLive, `UPDATE app.notebooks SET owner = 'u4' WHERE id = 'b2'; DELETE FROM app.pages WHERE id = 1;
		UPDATE app.pages SET notebook_id = 'b2' WHERE id = 4`)
	impactStep(t, d, impactSyncedReadLive, `UPDATE app.pages SET notebook_id = 'b2' WHERE notebook_id = 'b1';
		DELETE FROM app.notebooks WHERE id = 'b1'; INSERT INTO app.notebooks VALUES ('b1', 'u5', 'reborn');
		UPDATE app.pages SET notebook_id = 'b1' WHERE id IN (2, 3)`)
}

// TestImpactSQLRuleSameTransaction: a custom rule's relation and the rows
// it scopes change together, in several orders.
func TestImpactSQLRuleSameTransaction(t *testing.T) {
	t.Parallel()
	d := impactStart(t, impactSQLSetup, `INSERT INTO app.acl VALUES (1, 'red'), (2, 'blue');
		INSERT INTO app.docs SELECT i, 1 + i % 2, 'd' FROM generate_series(1, 8) i`, impactSQLLive)
	impactStep(t, d, impactSQLLive, `UPDATE app.docs SET acl_id = 2 WHERE id = 2; UPDATE app.acl SET team = 'green' WHERE id = 2`)
	impactStep(t, d, impactSQLLive, `UPDATE app.acl SET team = 'white' WHERE id = 1; UPDATE app.docs SET acl_id = 1 WHERE id = 2;
		UPDATE app.acl SET team = 'red' WHERE id = 1`)
	impactStep(t, d, impactSQLLive, `DELETE FROM app.acl WHERE id = 2; INSERT INTO app.acl VALUES (2, 'black');
		DELETE FROM app.docs WHERE id = 3; UPDATE app.docs SET title = 'k' WHERE id = 5`)
	impactStep(t, d, impactSQLLive, `UPDATE app.docs SET acl_id = 3 WHERE id = 5; INSERT INTO app.acl VALUES (3, 'pink');
		UPDATE app.acl SET team = NULL WHERE id = 1`)
	impactStep(t, d, impactSQLLive, `DELETE FROM app.acl WHERE id = 3; UPDATE app.acl SET team = 'red' WHERE id = 1;
		INSERT INTO app.docs VALUES (30, 1, 'n')`)
}

// TestImpactReplayIsNoOp: a batch that replays a durable transaction
// which moved rows through a dependency, followed by a new dependency change,
// leaves the durable state alone and adds exactly the new transaction's moves.
func TestImpactReplayIsNoOp(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, impactPathSetup)
	w := startStreaming(t, d, workerConfig(d, "w1"))
	impactStep(t, d, impactPathLive, impactPathSeed)
	lsn := impactStep(t, d, impactPathLive, `UPDATE app.owners SET user_id = 'u4' WHERE id = 'o1'; UPDATE app.tasks SET title = 'r' WHERE id = 3;
		DELETE FROM app.tasks WHERE id = 6`)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	before := materializedState(t, d)
	moved := impactSorted(rowsOf(t, d, `SELECT table_id, key FROM synchro.membership WHERE scope = 'user:u4' AND to_lsn IS NULL`))
	if len(moved) < 5 {
		t.Fatalf("user:u4 holds %v", moved)
	}
	replayThenMaterialize(t, d, lsn, newEvent{relationID: queryInt(t, d, `SELECT relation_id FROM synchro.relation WHERE relation_oid = 'app.owners'::regclass`),
		key: "o1", op: "update", image: `{"id": "o1", "user_id": "u42"}`, fenceID: "00000000-0000-0000-0000-0000000000f4", version: "vo1"})
	after := materializedState(t, d)
	for name, rows := range before {
		if name == "projection" || name == "membership" {
			continue
		}
		for _, r := range rows {
			if !slices.Contains(after[name], r) {
				t.Fatalf("%s row %q gone after the replay", name, r)
			}
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger`); n != int64(len(before["txn_ledger"])+1) {
		t.Fatalf("%d ledger rows after the replay, want %d", n, len(before["txn_ledger"])+1)
	}
	got := impactSorted(rowsOf(t, d, `SELECT table_id, key FROM synchro.membership WHERE scope = 'user:u42' AND to_lsn IS NULL`))
	if !slices.Equal(got, moved) {
		t.Fatalf("user:u42 holds %v, want %v", got, moved)
	}
	for _, sc := range []struct{ scope, op string }{{"user:u4", "delete"}, {"user:u42", "upsert"}} {
		got := impactSorted(rowsOf(t, d, `SELECT table_id, key FROM synchro.effect WHERE commit_lsn = 'FFFF/0' AND scope = $1 AND op = $2`, sc.scope, sc.op))
		if !slices.Equal(got, moved) {
			t.Fatalf("%s effects in %s at the new transaction: %v, want %v", sc.op, sc.scope, got, moved)
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.effect WHERE commit_lsn = 'FFFF/0'`); n != int64(2*len(moved)) {
		t.Fatalf("%d effects at the new transaction, want %d", n, 2*len(moved))
	}
	requireEffectVersions(t, d)
	requireDigests(t, d)
}

// impactSyncedMembersSetup: docs scoped by a members relation that is itself a
// synced table (member rows are in their user's scope).
const impactSyncedMembersSetup = `CREATE SCHEMA app;
	CREATE TABLE app.docs (id int PRIMARY KEY, title text);
	CREATE TABLE app.doc_members (id bigint PRIMARY KEY, doc_id int REFERENCES app.docs ON DELETE SET NULL, user_id text);
	SELECT synchro.register_table('app.doc_members', '{"kind":"column","template":"user:{user_id}"}');
	SELECT synchro.register_table('app.docs', '{"kind":"members","relation":"app.doc_members","column":"doc_id","template":"user:{user_id}"}');
	CREATE TABLE app.plain (id int PRIMARY KEY);
	ALTER PUBLICATION synchro ADD TABLE app.plain`

const impactSyncedMembersLive = impactMembersLive + `
	UNION SELECT 'user:' || m.user_id, s.table_id, m.id::text FROM app.doc_members m
	JOIN synchro.synced_table s ON s.name = 'doc_members' WHERE m.user_id IS NOT NULL`

var impactSyncedMembersWorkload = []string{
	`INSERT INTO app.docs SELECT i, 'd' || i FROM generate_series(1, 6) i`,
	`INSERT INTO app.doc_members VALUES (1, 1, 'u1'), (2, 2, 'u1'), (3, 2, 'u2')`,
	`UPDATE app.docs SET title = 'x' WHERE id = 2`,
	`INSERT INTO app.plain VALUES (1); UPDATE app.doc_members SET user_id = 'u3' WHERE id = 3; INSERT INTO app.plain VALUES (2);
	 UPDATE app.docs SET title = 'y' WHERE id = 2; INSERT INTO app.plain VALUES (3)`,
	`UPDATE app.docs SET title = 'z' WHERE id = 1`,
	`DELETE FROM app.docs WHERE id = 2`,
	`UPDATE app.doc_members SET doc_id = 3 WHERE id = 2; INSERT INTO app.docs VALUES (2, 'again')`,
	`INSERT INTO app.docs VALUES (7, 'seven'); INSERT INTO app.doc_members VALUES (7, 7, 'u7'); UPDATE app.docs SET title = 's' WHERE id = 7`,
	`UPDATE app.docs SET title = 't' WHERE id = 7`,
	`INSERT INTO app.plain VALUES (4)`,
	`DELETE FROM app.doc_members WHERE id = 7; INSERT INTO app.doc_members VALUES (7, 2, 'u7'); DELETE FROM app.docs WHERE id = 3`,
	`UPDATE app.docs SET title = 'u' WHERE id = 2; UPDATE app.docs SET title = 'v' WHERE id = 1`,
}

// TestImpactSyncedMembersBatch: a members relation that is itself synced,
// changed together with the docs it scopes (with unregistered events between),
// one transaction at a time and in one batch.
func TestImpactSyncedMembersBatch(t *testing.T) {
	t.Parallel()
	a := impactStart(t, impactSyncedMembersSetup, "", impactSyncedMembersLive)
	for i, sql := range impactSyncedMembersWorkload {
		lsn := impactStep(t, a, impactSyncedMembersLive, sql)
		if i == 3 {
			// Events 0, 2 and 4 are not applicable; the member moves at 1, doc 2 changes at 3.
			ev := impactEvents(t, a, lsn)
			impactRequireEvent(t, ev, "user:u2|3|delete", 1)
			impactRequireEvent(t, ev, "user:u3|3|upsert", 1)
			impactRequireEvent(t, ev, "user:u2|2|delete", 3)
			impactRequireEvent(t, ev, "user:u3|2|upsert", 3)
			impactRequireEvent(t, ev, "user:u1|2|upsert", 3)
		}
	}

	b := testdb.New(t)
	b.Exec(t, impactSyncedMembersSetup)
	materializeInOneBatch(t, b, startStreaming(t, b, workerConfig(b, "wb")), impactSyncedMembersWorkload)
	impactCheck(t, b, impactSyncedMembersLive)
	requireSameState(t, "one-by-one vs one batch", materializedState(t, a), materializedState(t, b))
}
