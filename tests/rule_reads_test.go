package tests

// What an sql scope rule may read. Materialization re-evaluates a synced row's
// membership when a relation its rule declares in "impacts" changes (through the
// impact query), and only then, so a membership query that reads the projection
// of an undeclared relation would keep stale memberships without any drift or
// readiness signal. Registration refuses such a rule, a synchro.projected call
// whose relation it cannot tell, and reads of Synchro's tables and functions
// other than synchro.projected.

import (
	"slices"
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// ruleReadsSetup: app.rep2 is scoped by the team of its acl rows; app.acl is
// already captured (as a dependency), as when another rule reads it.
const ruleReadsSetup = `CREATE TABLE app.acl (id int PRIMARY KEY, rep_id text, team text);
	CREATE TABLE app.teams (id text PRIMARY KEY, name text);
	CREATE TABLE app.rep2 (id text PRIMARY KEY, title text);
	SELECT synchro.register_dependency('app.acl')`

const ruleReadsMembership = `SELECT ''team:''||(a.image->>''team'') FROM synchro.projected(''app.acl'') a WHERE a.image->>''rep_id'' = $1->>''id''`

func TestRegisterSQLRuleRefusesUndeclaredReads(t *testing.T) {
	reg := func(rule string) string { return `SELECT synchro.register_table('app.rep2', '` + rule + `')` }
	const undeclared = `sql scope_rule membership reads the projection of app.acl, which its "impacts" do not declare`
	const nonConstant = `calls synchro.projected with an argument that is not a constant relation`
	runRejectCases(t, []rejectCase{
		{
			name: "membership reads an undeclared relation", setup: ruleReadsSetup,
			call:  reg(`{"kind":"sql","membership":"` + ruleReadsMembership + `"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: undeclared,
		},
		{
			name: "membership reads an unregistered undeclared relation", setup: `CREATE TABLE app.acl (id int PRIMARY KEY, rep_id text, team text);
				CREATE TABLE app.rep2 (id text PRIMARY KEY, title text)`,
			call:  reg(`{"kind":"sql","membership":"` + ruleReadsMembership + `"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: undeclared,
		},
		{
			name: "undeclared read in a subquery", setup: ruleReadsSetup,
			call:  reg(`{"kind":"sql","membership":"SELECT ''all'' WHERE EXISTS (SELECT FROM synchro.projected(''app.acl'') a WHERE a.image->>''rep_id'' = $1->>''id'')"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: undeclared,
		},
		{
			name: "undeclared read in a materialized CTE", setup: ruleReadsSetup,
			call:  reg(`{"kind":"sql","membership":"WITH a AS MATERIALIZED (SELECT * FROM synchro.projected(''app.acl'')) SELECT ''team:''||(a.image->>''team'') FROM a WHERE a.image->>''rep_id'' = $1->>''id''"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: undeclared,
		},
		{
			name: "undeclared read in the select list", setup: ruleReadsSetup,
			call:  reg(`{"kind":"sql","membership":"SELECT ''team:''||((synchro.projected(''app.acl'')).image->>''team'')"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: undeclared,
		},
		{
			name: "undeclared read besides a declared one", setup: ruleReadsSetup,
			call: reg(`{"kind":"sql","membership":"SELECT ''team:''||(t.image->>''name'') FROM synchro.projected(''app.acl'') a JOIN synchro.projected(''app.teams'') t ON t.key = a.image->>''team'' WHERE a.image->>''rep_id'' = $1->>''id''",
				"impacts":{"app.acl":"SELECT $1->>''rep_id''"}}`),
			state: stateInvalidParameterValue, relation: "app.rep2",
			rule: `sql scope_rule membership reads the projection of app.teams, which its "impacts" do not declare`,
		},
		{
			name: "impact query reads an undeclared relation", setup: ruleReadsSetup,
			call: reg(`{"kind":"sql","membership":"` + ruleReadsMembership + `",
				"impacts":{"app.acl":"SELECT $1->>''rep_id'' FROM synchro.projected(''app.teams'') t WHERE t.key = $1->>''team''"}}`),
			state: stateInvalidParameterValue, relation: "app.rep2",
			rule: `sql scope_rule impact query for app.acl reads the projection of app.teams, which its "impacts" do not declare`,
		},
		{
			name: "projected relation computed from the row", setup: ruleReadsSetup,
			call: reg(`{"kind":"sql","membership":"SELECT ''team:''||(a.image->>''team'') FROM synchro.projected(($1->>''rel'')::regclass) a",
				"impacts":{"app.acl":"SELECT $1->>''rep_id''"}}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: `sql scope_rule membership ` + nonConstant,
		},
		{
			name: "projected relation from a subquery", setup: ruleReadsSetup,
			call: reg(`{"kind":"sql","membership":"SELECT ''team:''||(a.image->>''team'') FROM synchro.projected((SELECT ''app.acl''::regclass)) a",
				"impacts":{"app.acl":"SELECT $1->>''rep_id''"}}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: `sql scope_rule membership ` + nonConstant,
		},
		{
			name: "impact query with a computed projected relation", setup: ruleReadsSetup,
			call: reg(`{"kind":"sql","membership":"` + ruleReadsMembership + `",
				"impacts":{"app.acl":"SELECT r.key FROM synchro.projected((''app.'' || ''rep2'')::regclass) r"}}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: `sql scope_rule impact query for app.acl ` + nonConstant,
		},
		{
			name: "membership reads synchro.projection directly", setup: ruleReadsSetup,
			call:  reg(`{"kind":"sql","membership":"SELECT ''team:''||(p.image->>''team'') FROM synchro.projection p WHERE p.image->>''rep_id'' = $1->>''id''"}`),
			state: stateInvalidParameterValue, relation: "app.rep2",
			rule: `sql scope_rule membership reads synchro.projection directly; a rule reads projections only through synchro.projected(relation)`,
		},
		{
			name: "membership calls another synchro function", setup: ruleReadsSetup,
			call:  reg(`{"kind":"sql","membership":"SELECT ''team:''||(l.image->>''team'') FROM synchro.projection_lookup(1, ''rep_id'', ARRAY[$1->>''id'']) l"}`),
			state: stateInvalidParameterValue, relation: "app.rep2",
			rule: `sql scope_rule membership calls synchro.projection_lookup; a rule reads projections only through synchro.projected(relation)`,
		},
	})
}

// TestSQLRuleDeclaredReadMovesRows: the rule of the refused case above, with
// app.acl declared in "impacts", registers, and a change to an acl row moves the
// rep2 rows it points at between scopes (membership edges and effects follow).
func TestSQLRuleDeclaredReadMovesRows(t *testing.T) {
	t.Parallel()
	const live = `SELECT 'team:' || a.team, s.table_id, r.id FROM app.rep2 r JOIN app.acl a ON a.rep_id = r.id
		JOIN synchro.synced_table s ON s.name = 'rep2' WHERE a.team IS NOT NULL`
	d := impactStart(t, `CREATE SCHEMA app;
		CREATE TABLE app.acl (id int PRIMARY KEY, rep_id text, team text);
		CREATE TABLE app.rep2 (id text PRIMARY KEY, title text);
		SELECT synchro.register_dependency('app.acl');
		SELECT synchro.register_table('app.rep2', $${"kind":"sql",
			"membership":"SELECT 'team:'||(a.image->>'team') FROM synchro.projected('app.acl') a WHERE a.image->>'rep_id' = $1->>'id'",
			"impacts":{"app.acl":"SELECT r.key FROM synchro.projected('app.rep2') r WHERE r.key = $1->>'rep_id'"}}$$)`,
		`INSERT INTO app.rep2 VALUES ('r1', 'one'), ('r2', 'two');
		INSERT INTO app.acl VALUES (1, 'r1', 'green'), (2, 'r2', 'green')`, live)
	tid := queryInt(t, d, `SELECT table_id FROM synchro.synced_table WHERE name = 'rep2'`)
	if got := rowsOf(t, d, `SELECT scope || ' ' || key FROM synchro.membership WHERE to_lsn IS NULL ORDER BY 1`); !slices.Equal(got, []string{"team:green r1", "team:green r2"}) {
		t.Fatalf("open membership after the seed: %v", got)
	}

	lsn := impactStep(t, d, live, `UPDATE app.acl SET team = 'purple' WHERE id = 1`)
	if got := rowsOf(t, d, `SELECT scope || ' ' || key FROM synchro.membership WHERE to_lsn IS NULL ORDER BY 1`); !slices.Equal(got, []string{"team:green r2", "team:purple r1"}) {
		t.Fatalf("open membership after the acl update: %v", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope = 'team:green' AND key = 'r1' AND to_lsn = $1::pg_lsn`, lsn); n != 1 {
		t.Fatalf("the team:green edge of r1 was not closed at the acl update's commit")
	}
	var got []string
	for _, e := range effects(t, d, lsn) {
		if int64(e.tableID) == tid {
			got = append(got, e.scope+" "+e.key+" "+e.op)
		}
	}
	if got = impactSorted(got); !slices.Equal(got, []string{"team:green r1 delete", "team:purple r1 upsert"}) {
		t.Fatalf("effects of the acl update: %v", got)
	}
}

// TestRegisterSQLRuleRefusesHiddenReads: a function the rule calls could read a
// table where registration cannot see it (so a change there would leave
// memberships stale), or answer differently when a transaction is materialized
// again. A rule may call IMMUTABLE functions and built-ins that are not
// VOLATILE; registration refuses any other call, also in an impact query and
// under a quoted name, and a rule that fails when planned without its parameter.
func TestRegisterSQLRuleRefusesHiddenReads(t *testing.T) {
	const setup = ruleReadsSetup + `;
		CREATE FUNCTION app.team_of(text) RETURNS text LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN (SELECT team FROM app.acl WHERE rep_id = $1 LIMIT 1); END $$;
		CREATE FUNCTION app."Pick Team"() RETURNS text LANGUAGE plpgsql VOLATILE AS $$ BEGIN RETURN 'x'; END $$;
		CREATE SEQUENCE app.s`
	reg := func(rule string) string { return `SELECT synchro.register_table('app.rep2', '` + rule + `')` }
	const notImmutable = `, which is not IMMUTABLE (or is a VOLATILE built-in)`
	runRejectCases(t, []rejectCase{
		{
			name: "a stable function that reads a table", setup: setup,
			call:  reg(`{"kind":"sql","membership":"SELECT ''team:''||app.team_of($1->>''id'')"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: `sql scope_rule membership calls app.team_of` + notImmutable,
		},
		{
			name: "a volatile built-in", setup: setup,
			call:  reg(`{"kind":"sql","membership":"SELECT ''team:''||(random() * 3)::int"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: `sql scope_rule membership calls pg_catalog.random` + notImmutable,
		},
		{
			name: "a quoted volatile function in a subquery", setup: setup,
			call:  reg(`{"kind":"sql","membership":"SELECT s FROM (SELECT ''team:''||app.\"Pick Team\"() AS s) x"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: `sql scope_rule membership calls app."Pick Team"` + notImmutable,
		},
		{
			name: "an impact query calling a volatile built-in", setup: setup,
			call: reg(`{"kind":"sql","membership":"` + ruleReadsMembership + `",
				"impacts":{"app.acl":"SELECT $1->>''rep_id'' WHERE nextval(''app.s'') > 0"}}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: `sql scope_rule impact query for app.acl calls pg_catalog.nextval` + notImmutable,
		},
		{
			// Checking the select list plans it; a constant error there would
			// fail every evaluation under a generic plan.
			name: "a rule whose generic plan fails", setup: setup,
			call:  reg(`{"kind":"sql","membership":"SELECT CASE WHEN $1->>''id'' = ''x'' THEN (1/0)::text ELSE ''all'' END"}`),
			state: stateInvalidParameterValue, relation: "app.rep2", rule: `sql scope_rule membership fails when planned for any row: division by zero`,
		},
	})
}

// TestSQLRuleCallsImmutableFunctions: a rule calling an IMMUTABLE function of
// the application and stable built-ins registers and is evaluated.
func TestSQLRuleCallsImmutableFunctions(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.notes (id text PRIMARY KEY, owner text);
		CREATE FUNCTION app.norm(text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN RETURN lower(btrim($1)); END $$;
		SELECT synchro.register_table('app.notes', $${"kind":"sql",
			"membership":"SELECT 'user:'||app.norm($1->>'owner') WHERE to_regclass('app.notes') IS NOT NULL"}$$)`)
	startStreaming(t, d, workerConfig(d, "w1"))
	d.Exec(t, `INSERT INTO app.notes VALUES ('n1', ' Ada ')`)
	waitMaterialized(t, d)
	if got := rowsOf(t, d, `SELECT scope || ' ' || key FROM synchro.membership WHERE to_lsn IS NULL`); !slices.Equal(got, []string{"user:ada n1"}) {
		t.Fatalf("open membership: %v", got)
	}
}

// ownReadSetup: a doc is in the scope of its parent's owner, read from the
// projection of its own table (no impact query: a change of the parent does
// not move its children).
const ownReadSetup = `CREATE SCHEMA app;
	CREATE TABLE app.docs (id text PRIMARY KEY, parent text, owner text);
	SELECT synchro.register_table('app.docs', $${"kind":"sql",
		"membership":"SELECT 'user:' || coalesce((SELECT p.image->>'owner' FROM synchro.projected('app.docs') p WHERE p.key = $1->>'parent'), $1->>'owner')"}$$)`

// TestSQLRuleReadingItsOwnTableMaterializesInCommitOrder: a membership query
// that reads its own table's projection is evaluated against the state of the
// transaction it materializes, also in a batch of several transactions: its
// own relation is recorded as read by the rule, so its changes segment the
// batch. The batch's result equals the one-by-one result (the child stays in
// the scope its parent's owner had when the child was written).
func TestSQLRuleReadingItsOwnTableMaterializesInCommitOrder(t *testing.T) {
	t.Parallel()
	workload := []string{
		`INSERT INTO app.docs VALUES ('root', NULL, 'u1')`,
		`INSERT INTO app.docs VALUES ('child', 'root', 'u9')`,
		`UPDATE app.docs SET owner = 'u2' WHERE id = 'root'`,
	}
	a := testdb.New(t)
	a.Exec(t, ownReadSetup)
	startStreaming(t, a, workerConfig(a, "wa"))
	for _, sql := range workload {
		commitTxn(t, a, sql)
		waitMaterialized(t, a)
	}
	if got := rowsOf(t, a, `SELECT scope || ' ' || key FROM synchro.membership WHERE to_lsn IS NULL ORDER BY 1`); !slices.Equal(got, []string{"user:u1 child", "user:u2 root"}) {
		t.Fatalf("one by one: open memberships %v", got)
	}

	b := testdb.New(t)
	b.Exec(t, ownReadSetup)
	first := startStreaming(t, b, workerConfig(b, "wb"))
	materializeInOneBatch(t, b, first, workload)
	requireSameState(t, "one-by-one vs one batch", materializedState(t, a), materializedState(t, b))
}
