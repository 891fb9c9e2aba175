package tests

import (
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

const stateNotInPrerequisiteState = "55000"

// populatedRule is the message part that names the missing bootstrap.
const populatedRule = "it already holds rows, and registering a populated relation needs a projection bootstrap, which is not available yet"

// TestRegistrationRefusesPopulatedRelations: every relation a registration
// would register (the synced table, a dependency, a dependency a path or
// members rule registers by itself, a partitioned table through its partitions)
// is refused with 55000 while it holds a visible row, naming it; nothing is
// registered. Its projection would start empty and serve incomplete scopes.
func TestRegistrationRefusesPopulatedRelations(t *testing.T) {
	const parents = `CREATE TABLE app.owners (id text PRIMARY KEY, user_id text);
		CREATE TABLE app.projects (id int PRIMARY KEY, owner_id text REFERENCES app.owners);
		CREATE TABLE app.tasks (id int PRIMARY KEY, project_id int REFERENCES app.projects);`
	const members = `CREATE TABLE app.docs (id int PRIMARY KEY, title text);
		CREATE TABLE app.doc_members (id int PRIMARY KEY, doc_id int REFERENCES app.docs, user_id text);`
	path := `SELECT synchro.register_table('app.tasks', '{"kind":"path","path":["project_id","owner_id"],"template":"user:{user_id}"}')`
	membersRule := `SELECT synchro.register_table('app.docs', '{"kind":"members","relation":"app.doc_members","template":"user:{user_id}"}')`
	runRejectCases(t, []rejectCase{
		{
			name:  "synced table",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, v text); INSERT INTO app.t VALUES (1, 'x')`,
			call:  `SELECT synchro.register_table('app.t', ` + sharedRule + `)`,
			state: stateNotInPrerequisiteState, relation: "app.t", rule: populatedRule,
		},
		{
			name:  "dependency",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, v text); INSERT INTO app.t VALUES (1, 'x')`,
			call:  `SELECT synchro.register_dependency('app.t')`,
			state: stateNotInPrerequisiteState, relation: "app.t", rule: populatedRule,
		},
		{
			name:  "path parent registered by the rule",
			setup: parents + `INSERT INTO app.owners VALUES ('o1', 'u1')`,
			call:  path, state: stateNotInPrerequisiteState, relation: "app.owners", rule: populatedRule,
		},
		{
			name:  "path middle step registered by the rule",
			setup: parents + `INSERT INTO app.projects VALUES (1, NULL)`,
			call:  path, state: stateNotInPrerequisiteState, relation: "app.projects", rule: populatedRule,
		},
		{
			name:  "members relation registered by the rule",
			setup: members + `INSERT INTO app.doc_members VALUES (1, NULL, 'u1')`,
			call:  membersRule, state: stateNotInPrerequisiteState, relation: "app.doc_members", rule: populatedRule,
		},
		{
			name: "sql rule impacts relation registered by the rule",
			setup: `CREATE TABLE app.docs (id int PRIMARY KEY, acl_id int);
				CREATE TABLE app.acl (id int PRIMARY KEY, user_id text); INSERT INTO app.acl VALUES (1, 'u1')`,
			call: `SELECT synchro.register_table('app.docs', '{"kind":"sql",
				"membership":"SELECT ''user:''||(a.image->>''user_id'') FROM synchro.projected(''app.acl'') a WHERE a.key = $1->>''acl_id''",
				"impacts":{"app.acl":"SELECT $1->>''id''"}}')`,
			state: stateNotInPrerequisiteState, relation: "app.acl", rule: populatedRule,
		},
		{
			name: "partitioned table with a row in a partition",
			setup: `CREATE TABLE app.p (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
				CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (10); INSERT INTO app.p VALUES (1, 'x')`,
			call:  `SELECT synchro.register_table('app.p', ` + sharedRule + `)`,
			state: stateNotInPrerequisiteState, relation: "app.p", rule: populatedRule,
		},
	})
}

// TestRegistrationAcceptsEmptiedRelation: only visible rows count; a relation
// whose rows were deleted registers.
func TestRegistrationAcceptsEmptiedRelation(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.t (id int PRIMARY KEY, v text); INSERT INTO app.t VALUES (1, 'x'); DELETE FROM app.t`)
	registerTable(t, d, "app.t", `{"kind":"shared","scope":"all"}`, `{}`)
	requireCaptured(t, d, "app.t")
}

