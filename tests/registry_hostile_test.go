package tests

import (
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestRegisterRejectsRelationsCaptureCannotCarry: relations that pass the
// single-table checks of synchro.capture_identity but whose writes capture
// would lose or misread are refused before anything is installed.
func TestRegisterRejectsRelationsCaptureCannotCarry(t *testing.T) {
	reg := func(rel string) string { return `SELECT synchro.register_table('` + rel + `', ` + sharedRule + `)` }
	runRejectCases(t, []rejectCase{
		{
			// Fences and guards on Synchro's own tables would fire inside
			// registration, materialization and pruning.
			name: "table in the synchro schema", call: reg("synchro.shared_scope"),
			state: stateInvalidTableDefinition, relation: "synchro.shared_scope",
			rule: "it belongs to Synchro's own schema",
		},
		{
			name: "dependency in the synchro schema", call: `SELECT synchro.register_dependency('synchro.shared_scope')`,
			state: stateInvalidTableDefinition, relation: "synchro.shared_scope",
			rule: "it belongs to Synchro's own schema",
		},
		{
			// ALTER PUBLICATION ... ADD TABLE adds the children too, without
			// fences; their rows are read through the parent but never captured.
			name: "table with inheritance children",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, v text);
				CREATE TABLE app.t_old () INHERITS (app.t)`,
			call: reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "app.t_old inherits from it",
		},
		{
			// An unlogged partition's rows are not written to WAL: its fences
			// would never meet their row events.
			name: "partitioned table with an unlogged partition",
			setup: `CREATE TABLE app.p (id bigint PRIMARY KEY) PARTITION BY RANGE (id);
				CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (100);
				CREATE UNLOGGED TABLE app.p2 PARTITION OF app.p FOR VALUES FROM (100) TO (200)`,
			call: reg("app.p"), state: stateInvalidTableDefinition, relation: "app.p ",
			rule: "app.p2 is unlogged",
		},
		{
			// Logical decoding leaves stored generated columns out of every row.
			name:  "generated primary-key column",
			setup: `CREATE TABLE app.t (n int NOT NULL, id int GENERATED ALWAYS AS (n * 2) STORED PRIMARY KEY)`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: `primary-key column "id" is a generated column`,
		},
		{
			name:  "temporary table",
			call:  `CREATE TEMP TABLE tmp (id int PRIMARY KEY); ` + reg("pg_temp.tmp"),
			state: stateInvalidTableDefinition, relation: ".tmp", rule: "temporary tables are not written to WAL",
		},
		{
			name: "foreign table",
			setup: `CREATE FOREIGN DATA WRAPPER nowhere; CREATE SERVER nowhere FOREIGN DATA WRAPPER nowhere;
				CREATE FOREIGN TABLE app.t (id int NOT NULL) SERVER nowhere`,
			call: reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "only tables can be registered (this is a foreign table)",
		},
	})
}

// TestRegisterRejectsRulesThatCannotWork: scope rules that parse but could
// never evaluate as registered are refused at registration.
func TestRegisterRejectsRulesThatCannotWork(t *testing.T) {
	const tables = `CREATE TABLE app.t (id int PRIMARY KEY,
		owner_id_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx text)`
	long := "owner_id_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_and_more"
	reg := func(rule string) string { return `SELECT synchro.register_table('app.t', '` + rule + `')` }
	runRejectCases(t, []rejectCase{
		{
			// PostgreSQL truncates a name to 63 bytes, so the placeholder matched
			// the column at registration, while rendering looks the whole
			// placeholder up in the image and put every row in no scope.
			name: "template placeholder longer than a column name", setup: tables,
			call:  reg(`{"kind":"column","template":"user:{` + long + `}"}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `names unknown column "` + long + `"`,
		},
		{
			// Every row's scope would be too long to index: materialization
			// would fail on the first direct write and block capture.
			name: "shared scope longer than max_scope_bytes", setup: tables,
			call:  reg(`{"kind":"shared","scope":"` + strings.Repeat("s", 1501) + `"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "longer than synchro.max_scope_bytes() (1500 bytes)",
		},
		{
			name: "template whose own text is longer than max_scope_bytes", setup: tables,
			call:  reg(`{"kind":"column","template":"` + strings.Repeat("s", 1501) + `{id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "column scope_rule template renders scopes longer than synchro.max_scope_bytes() (1500 bytes)",
		},
		{
			name: "sql membership of several statements", setup: tables,
			call:  reg(`{"kind":"sql","membership":"SELECT ''a'' AS s) AS x; SELECT 1 FROM (SELECT 1"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "sql scope_rule membership is not a valid query",
		},
		{
			name:  "sql impact query of several statements",
			setup: tables + `; CREATE TABLE app.acl (id int PRIMARY KEY, t_id int)`,
			call: reg(`{"kind":"sql","membership":"SELECT ''a''",
				"impacts":{"app.acl":"SELECT $1->>''t_id'') AS x; SELECT 1 FROM (SELECT 1"}}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "sql scope_rule impact query for app.acl is not a valid query",
		},
		{
			// The comment swallowed the check's closing text, so the check
			// read the alias it supplies; every evaluation then failed on
			// column "s" (and the check's LIMIT 0 was swallowed too).
			name: "sql membership whose comment swallows the embedding statement's end", setup: tables,
			call:  reg(`{"kind":"sql","membership":"SELECT $1->>''id'' AS owner) AS rule_query --"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "sql scope_rule membership is not a valid query",
		},
		{
			// Closes the subquery it is embedded in and opens another: the
			// check's statement parsed, every evaluation failed (column "s"
			// is ambiguous there).
			name: "sql membership that closes the query it is embedded in", setup: tables,
			call:  reg(`{"kind":"sql","membership":"SELECT ''a'' AS s) AS x, (SELECT ''b''"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "sql scope_rule membership is not a valid query",
		},
	})
}

// TestRuleQueryEndingInLineComment: a sql rule's membership and impact queries
// may end in a -- comment; they are embedded in Synchro's statements (the
// registration check, membership and impact evaluation) ending on their own
// line, so the comment ends with them and the rule evaluates as written.
func TestRuleQueryEndingInLineComment(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.acl (id int PRIMARY KEY, team text);
		CREATE TABLE app.docs (id int PRIMARY KEY, acl_id int);
		SELECT synchro.register_table('app.docs', '{"kind":"sql",
			"membership":"SELECT ''team:'' || (a.image->>''team'') FROM synchro.projected(''app.acl'') a WHERE a.key = $1->>''acl_id'' -- the acl''s team",
			"impacts":{"app.acl":"SELECT d.key FROM synchro.projected(''app.docs'') d WHERE d.image->>''acl_id'' = $1->>''id'' -- docs under the acl"}}')`)
	startStreaming(t, d, workerConfig(d, "w1"))
	commitTxn(t, d, `INSERT INTO app.acl VALUES (1, 'red'); INSERT INTO app.docs VALUES (10, 1)`)
	commitTxn(t, d, `UPDATE app.acl SET team = 'blue' WHERE id = 1`)
	waitMaterialized(t, d)
	got := rowsOf(t, d, `SELECT scope || ' ' || key FROM synchro.membership WHERE to_lsn IS NULL ORDER BY 1`)
	if want := "team:blue 10"; strings.Join(got, ",") != want {
		t.Fatalf("open membership %v, want %s", got, want)
	}
}

// TestRuleQueryCheckRunsNoInjectedStatement: the check of a custom rule query
// embeds it in its own statements; a query that closes that statement and
// starts others must be refused before any of them runs (they would run with
// the registering role's rights, and a stored rule made of several statements
// fails every materialization of the table, blocking capture). A sequence shows
// it, since nextval is not undone by the rejection's rollback.
func TestRuleQueryCheckRunsNoInjectedStatement(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY, owner_id text); CREATE SEQUENCE app.probe`)
	err := d.ExecErr(`SELECT synchro.register_table('app.t',
		'{"kind":"sql","membership":"SELECT ''a'' AS s) AS x; SELECT nextval(''app.probe''); SELECT 1 FROM (SELECT 1"}')`)
	requireRejected(t, err, stateInvalidParameterValue, "app.t", "sql scope_rule membership is not a valid query")
	if used := queryInt(t, d, `SELECT count(*) FROM app.probe WHERE is_called`); used != 0 {
		t.Fatal("a statement injected through a sql scope rule ran during registration")
	}
	requireNotCaptured(t, d, "app.t")
}

// TestUndoneRegistrationsLeaveCaptureWorking: registrations undone inside a
// transaction that commits (a savepoint rolled back, a failure caught by an
// exception handler after the rule's dependency was registered) leave no
// trigger, publication entry, generation or activation message behind: the
// running worker neither blocks on them nor captures the undone tables' writes,
// and captures the tables registered afterwards and before.
func TestUndoneRegistrationsLeaveCaptureWorking(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.notes (id int PRIMARY KEY, v text);
		CREATE TABLE app.orgs (id text PRIMARY KEY);
		CREATE TABLE app.later (id int PRIMARY KEY, org_id text REFERENCES app.orgs);
		SELECT synchro.register_table('app.notes', `+sharedRule+`)`)
	startStreaming(t, d, workerConfig(d, "w1"))
	gens := generationCount(t, d)

	commitTxn(t, d, `INSERT INTO app.notes VALUES (1, 'before');
		SAVEPOINT s;
		SELECT synchro.register_table('app.later', `+sharedRule+`);
		INSERT INTO app.later VALUES (1, NULL);
		ROLLBACK TO SAVEPOINT s;
		DO $$BEGIN
			-- Fails on the wire name after registering app.orgs as the path's dependency.
			PERFORM synchro.register_table('app.later', '{"kind":"path","path":["org_id"],"template":"org:{id}"}', '{"name":"notes"}');
		EXCEPTION WHEN duplicate_object THEN NULL;
		END$$;
		INSERT INTO app.later VALUES (2, NULL);
		INSERT INTO app.orgs VALUES ('o1');
		INSERT INTO app.later VALUES (3, 'o1');
		INSERT INTO app.notes VALUES (2, 'after')`)
	if got := generationCount(t, d); got != gens {
		t.Fatalf("registry generations: %d after undone registrations, %d before", got, gens)
	}
	requireNotCaptured(t, d, "app.later")
	requireNotCaptured(t, d, "app.orgs")

	// Registration refuses a populated relation: the uncaptured rows go first.
	d.Exec(t, `DELETE FROM app.later`)
	registerTable(t, d, "app.later", `{"kind":"shared","scope":"all"}`, `{}`)
	commitTxn(t, d, `INSERT INTO app.later VALUES (4, NULL); INSERT INTO app.orgs VALUES ('o2'); INSERT INTO app.notes VALUES (3, 'last')`)
	waitMaterialized(t, d)
	requireCaptured(t, d, "app.later")
	requireNotCaptured(t, d, "app.orgs")
	got := rowsOf(t, d, `SELECT r.relation_name || ':' || p.key FROM synchro.projection p
		JOIN synchro.relation r USING (relation_id) ORDER BY 1`)
	if want := "later:4 notes:1 notes:2 notes:3"; strings.Join(got, " ") != want {
		t.Fatalf("projected rows %v, want %s", got, want)
	}
}

// TestGuardPartitionsRefusesUnloggedPartition: an unlogged partition created
// under a registered root after registration is not guarded or recorded (its
// rows never reach WAL, so each fence written there would wait for a row event
// that never comes); the fence keeps refusing writes into it.
func TestGuardPartitionsRefusesUnloggedPartition(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.p (id int PRIMARY KEY) PARTITION BY RANGE (id);
		CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (10);
		SELECT synchro.register_table('app.p', `+sharedRule+`);
		CREATE UNLOGGED TABLE app.p2 PARTITION OF app.p FOR VALUES FROM (10) TO (20)`)
	requireRejected(t, d.ExecErr(`SELECT synchro.guard_partitions()`), stateInvalidTableDefinition, "app.p2",
		"is unlogged")
	if n := queryInt(t, d, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'app.p2'::regclass AND tgname IN ('synchro_truncate_guard', 'synchro_partition_guard')`); n != 0 {
		t.Fatalf("unlogged partition app.p2 got %d guards", n)
	}
	requireState(t, d.ExecErr(`INSERT INTO app.p VALUES (11)`), "55000", "app.p2")
	d.Exec(t, `INSERT INTO app.p VALUES (1)`)
}
