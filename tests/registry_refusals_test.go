package tests

import (
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestRegistrationOfPopulatedRelationsBootstraps: every relation a
// registration registers (the synced table, a dependency, a dependency a path
// or members rule registers by itself, a partitioned table through its
// partitions) is found holding a visible row: the registration commits with
// every relation of its generation waiting for a projection bootstrap, which it
// records (phase staging, naming them); the synced table is not in the schema
// manifest, and any further registry change is refused (55006) until the
// bootstrap is activated.
func TestRegistrationOfPopulatedRelationsBootstraps(t *testing.T) {
	t.Parallel()
	const parents = `CREATE TABLE app.owners (id text PRIMARY KEY, user_id text);
		CREATE TABLE app.projects (id int PRIMARY KEY, owner_id text REFERENCES app.owners);
		CREATE TABLE app.tasks (id int PRIMARY KEY, project_id int REFERENCES app.projects);`
	const members = `CREATE TABLE app.docs (id int PRIMARY KEY, title text);
		CREATE TABLE app.doc_members (id int PRIMARY KEY, doc_id int REFERENCES app.docs, user_id text);`
	path := `SELECT synchro.register_table('app.tasks', '{"kind":"path","path":["project_id","owner_id"],"template":"user:{user_id}"}')`
	membersRule := `SELECT synchro.register_table('app.docs', '{"kind":"members","relation":"app.doc_members","template":"user:{user_id}"}')`
	for _, c := range []struct {
		name, setup, call string
		pending           string // the relations left waiting, in relation_id order
	}{
		{"synced table", `CREATE TABLE app.t (id int PRIMARY KEY, v text); INSERT INTO app.t VALUES (1, 'x')`,
			`SELECT synchro.register_table('app.t', ` + sharedRule + `)`, "t"},
		{"dependency", `CREATE TABLE app.t (id int PRIMARY KEY, v text); INSERT INTO app.t VALUES (1, 'x')`,
			`SELECT synchro.register_dependency('app.t')`, "t"},
		{"path parent registered by the rule", parents + `INSERT INTO app.owners VALUES ('o1', 'u1')`, path, "projects,owners,tasks"},
		{"path middle step registered by the rule", parents + `INSERT INTO app.projects VALUES (1, NULL)`, path, "projects,owners,tasks"},
		{"members relation registered by the rule", members + `INSERT INTO app.doc_members VALUES (1, NULL, 'u1')`, membersRule, "doc_members,docs"},
		{"sql rule impacts relation registered by the rule",
			`CREATE TABLE app.docs (id int PRIMARY KEY, acl_id int);
				CREATE TABLE app.acl (id int PRIMARY KEY, user_id text); INSERT INTO app.acl VALUES (1, 'u1')`,
			`SELECT synchro.register_table('app.docs', '{"kind":"sql",
				"membership":"SELECT ''user:''||(a.image->>''user_id'') FROM synchro.projected(''app.acl'') a WHERE a.key = $1->>''acl_id''",
				"impacts":{"app.acl":"SELECT $1->>''id''"}}')`, "acl,docs"},
		{"partitioned table with a row in a partition",
			`CREATE TABLE app.p (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
				CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (10); INSERT INTO app.p VALUES (1, 'x')`,
			`SELECT synchro.register_table('app.p', ` + sharedRule + `)`, "p"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, "CREATE SCHEMA app; "+c.setup)
			d.Exec(t, c.call)
			if got := queryText(t, d, `SELECT string_agg(relation_name, ',' ORDER BY relation_id) FROM synchro.relation WHERE bootstrap_pending`); got != c.pending {
				t.Fatalf("pending relations %q, want %q", got, c.pending)
			}
			if got := queryText(t, d, `SELECT string_agg(r.relation_name, ',' ORDER BY r.relation_id)
				FROM synchro.stream_reset b CROSS JOIN unnest(b.relation_ids) id JOIN synchro.relation r ON r.relation_id = id
				WHERE b.kind = 'bootstrap' AND b.phase = 'staging'`); got != c.pending {
				t.Fatalf("the recorded bootstrap stages %q, want %q", got, c.pending)
			}
			if got := queryText(t, d, `SELECT synchro.schema_manifest()::text`); got != `{"tables": []}` {
				t.Fatalf("manifest %s before the bootstrap", got)
			}
			d.Exec(t, `CREATE TABLE app.other (id int PRIMARY KEY)`)
			requireState(t, d.ExecErr(`SELECT synchro.register_table('app.other', `+sharedRule+`)`), "55006",
				"is waiting for its projection bootstrap")
		})
	}
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

// TestRegistrationRefusesRulesFollowingTheWrongColumn: a members column, or a
// path step's column, must be a single-column foreign key to the key of the
// relation the rule compares it with (the registered table; the step's next
// relation); otherwise every row would silently belong to no scope. The message
// says what the column references instead. A template placeholder must be a
// column of the relation the template is evaluated over.
func TestRegistrationRefusesRulesFollowingTheWrongColumn(t *testing.T) {
	const issue = `CREATE TABLE app.projects (id uuid PRIMARY KEY);
		CREATE TABLE app.tasks (id text PRIMARY KEY, project_id uuid);
		CREATE TABLE app.project_members (id int PRIMARY KEY, project_id uuid REFERENCES app.projects, user_id text);`
	const docs = `CREATE TABLE app.docs (id int PRIMARY KEY, code text UNIQUE, owner_id text);
		CREATE TABLE app.m (id int PRIMARY KEY, doc_id int, doc_code text REFERENCES app.docs (code), user_id text);`
	const orgs = `CREATE TABLE app.orgs (id int PRIMARY KEY, code text UNIQUE, owner_id text);
		CREATE TABLE app.teams (id int PRIMARY KEY, org_id int REFERENCES app.orgs, org_code text REFERENCES app.orgs (code));
		CREATE TABLE app.t (id int PRIMARY KEY, team_id int REFERENCES app.teams);`
	members := func(rel, rule string) string {
		return `SELECT synchro.register_table('` + rel + `', '{"kind":"members",` + rule + `,"template":"user:{user_id}"}')`
	}
	path := func(steps, template string) string {
		return `SELECT synchro.register_table('app.t', '{"kind":"path","path":[` + steps + `],"template":"` + template + `"}')`
	}
	runRejectCases(t, []rejectCase{
		{
			name: "members column references another table", setup: issue,
			call:  members("app.tasks", `"relation":"app.project_members","column":"project_id"`),
			state: stateInvalidParameterValue, relation: "app.tasks",
			rule: `members scope_rule column "project_id" of app.project_members must be a single-column foreign key to the primary key of app.tasks, but it references app.projects (id)`,
		},
		{
			name: "members column references nothing", setup: docs,
			call:  members("app.docs", `"relation":"app.m","column":"doc_id"`),
			state: stateInvalidParameterValue, relation: "app.docs",
			rule: `members scope_rule column "doc_id" of app.m must be a single-column foreign key to the primary key of app.docs, but it references nothing`,
		},
		{
			name: "members column references a column other than the key", setup: docs,
			call:  members("app.docs", `"relation":"app.m","column":"doc_code"`),
			state: stateInvalidParameterValue, relation: "app.docs", rule: `but it references app.docs (code)`,
		},
		{
			name: "members column found by its only foreign key, to a column other than the key", setup: docs,
			call:  members("app.docs", `"relation":"app.m"`),
			state: stateInvalidParameterValue, relation: "app.docs", rule: `column "doc_code" of app.m must be a single-column foreign key to the primary key of app.docs, but it references app.docs (code)`,
		},
		{
			name: "path step references a relation other than its foreign key's", setup: orgs,
			call:  path(`"team_id",{"column":"org_id","references":"app.teams"}`, "org:{id}"),
			state: stateInvalidParameterValue, relation: "app.t",
			rule: `path scope_rule column "org_id" of app.teams must be a single-column foreign key to the primary key of app.teams, but it references app.orgs (id)`,
		},
		{
			name: "path step by its foreign key to a column other than the key", setup: orgs,
			call:  path(`"team_id","org_code"`, "org:{id}"),
			state: stateInvalidParameterValue, relation: "app.t", rule: `column "org_code" of app.teams must be a single-column foreign key to the primary key of app.orgs, but it references app.orgs (code)`,
		},
		{
			name: "path step naming the relation of a foreign key to a column other than the key", setup: orgs,
			call:  path(`"team_id",{"column":"org_code","references":"app.orgs"}`, "org:{id}"),
			state: stateInvalidParameterValue, relation: "app.t", rule: `but it references app.orgs (code)`,
		},
		{
			name:  "members template over a column of the registered table",
			setup: docs + `CREATE TABLE app.m2 (id int PRIMARY KEY, doc_id int REFERENCES app.docs, user_id text)`,
			call:  `SELECT synchro.register_table('app.docs', '{"kind":"members","relation":"app.m2","template":"user:{owner_id}"}')`,
			state: stateUndefinedColumn, relation: "app.m2", rule: `members scope_rule template names unknown column "owner_id"`,
		},
		{
			name: "path template over a column of an earlier relation", setup: orgs,
			call:  path(`"team_id","org_id"`, "team:{org_code}"),
			state: stateUndefinedColumn, relation: "app.orgs", rule: `path scope_rule template names unknown column "org_code"`,
		},
	})
}

// TestRegistrationAcceptsDeclaredReferenceWithoutForeignKey: a path step that
// names its "references" may follow a column with no foreign key.
func TestRegistrationAcceptsDeclaredReferenceWithoutForeignKey(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.orgs (id int PRIMARY KEY, owner_id text);
		CREATE TABLE app.t (id int PRIMARY KEY, org_id int)`)
	registerTable(t, d, "app.t", `{"kind":"path","path":[{"column":"org_id","references":"app.orgs"}],"template":"user:{owner_id}"}`, `{}`)
	requireCaptured(t, d, "app.orgs")
}
