package tests

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// SQLSTATEs raised by the registry functions.
const (
	stateInvalidTableDefinition = "42P16"
	stateInvalidParameterValue  = "22023"
	stateUndefinedColumn        = "42703"
	stateUndefinedTable         = "42P01"
	stateObjectInUse            = "55006"
	stateDuplicateObject        = "42710"
)

const sharedRule = `'{"kind":"shared","scope":"all"}'`

// requireRejected asserts a registration error: its SQLSTATE, that it names the
// relation (schema-qualified) and the rule broken.
func requireRejected(t *testing.T, err error, state, relation, rule string) {
	t.Helper()
	requireState(t, err, state, rule)
	if !strings.Contains(err.Error(), relation) {
		t.Fatalf("error %q does not name relation %s", err.Error(), relation)
	}
}

func queryInt(t *testing.T, d *testdb.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := d.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return n
}

func queryText(t *testing.T, d *testdb.DB, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := d.Pool.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return s
}

func queryStrings(t *testing.T, d *testdb.DB, sql string, args ...any) []string {
	t.Helper()
	var out []string
	if err := d.Pool.QueryRow(context.Background(), sql, args...).Scan(&out); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return out
}

func generationCount(t *testing.T, d *testdb.DB) int64 {
	t.Helper()
	return queryInt(t, d, `SELECT count(*) FROM synchro.registry_generation`)
}

func maxGeneration(t *testing.T, d *testdb.DB) int64 {
	t.Helper()
	return queryInt(t, d, `SELECT max(generation) FROM synchro.registry_generation`)
}

// registerTable runs synchro.register_table and returns the table id.
func registerTable(t *testing.T, d *testdb.DB, relation, rule, options string) int64 {
	t.Helper()
	return queryInt(t, d, `SELECT synchro.register_table($1::regclass, $2::jsonb, $3::jsonb)`, relation, rule, options)
}

// relationID is the registered relation_id of a relation (by OID).
func relationID(t *testing.T, d *testdb.DB, relation string) int64 {
	t.Helper()
	return queryInt(t, d, `SELECT relation_id FROM synchro.relation WHERE relation_oid = $1::regclass`, relation)
}

// requireCaptured asserts that a registered relation has the three Synchro
// triggers and is a member of publication "synchro".
func requireCaptured(t *testing.T, d *testdb.DB, relation string) {
	t.Helper()
	triggers := queryStrings(t, d, `SELECT coalesce(array_agg(tgname::text ORDER BY tgname), '{}')
		FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal AND tgname LIKE 'synchro%'`, relation)
	want := []string{"synchro_fence", "synchro_key_guard", "synchro_truncate_guard"}
	if !slices.Equal(triggers, want) {
		t.Fatalf("%s has triggers %v, want %v", relation, triggers, want)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
		WHERE p.pubname = 'synchro' AND pr.prrelid = $1::regclass`, relation); n != 1 {
		t.Fatalf("%s is not in publication synchro", relation)
	}
}

// requireNotCaptured asserts that a relation has no Synchro trigger and is in no publication.
func requireNotCaptured(t *testing.T, d *testdb.DB, relation string) {
	t.Helper()
	if n := queryInt(t, d, `SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname LIKE 'synchro%'`, relation); n != 0 {
		t.Fatalf("%s has %d synchro triggers, want none", relation, n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM pg_publication_rel WHERE prrelid = $1::regclass`, relation); n != 0 {
		t.Fatalf("%s is in a publication", relation)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.relation WHERE relation_oid = $1::regclass`, relation); n != 0 {
		t.Fatalf("%s is registered", relation)
	}
}

type rejectCase struct {
	name     string
	setup    string // runs after CREATE SCHEMA app
	call     string
	state    string
	relation string // the schema-qualified name the message must carry
	rule     string // text naming the rule broken
}

func runRejectCases(t *testing.T, cases []rejectCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, "CREATE SCHEMA app;\n"+tc.setup)
			gens := generationCount(t, d)
			rels := queryInt(t, d, `SELECT count(*) FROM synchro.relation`)

			requireRejected(t, d.ExecErr(tc.call), tc.state, tc.relation, tc.rule)

			// A rejected registration leaves the registry as it was.
			if got := generationCount(t, d); got != gens {
				t.Fatalf("registry generations: %d after a rejected registration, %d before", got, gens)
			}
			if got := queryInt(t, d, `SELECT count(*) FROM synchro.relation`); got != rels {
				t.Fatalf("registered relations: %d after a rejected registration, %d before", got, rels)
			}
		})
	}
}

// TestRegisterTableRejectsCaptureIdentity covers synchro.capture_identity through
// synchro.register_table: only permanent tables with one non-deferrable primary-key
// column of a portable key type and REPLICA IDENTITY DEFAULT everywhere.
func TestRegisterTableRejectsCaptureIdentity(t *testing.T) {
	reg := func(rel string) string { return `SELECT synchro.register_table('` + rel + `', ` + sharedRule + `)` }
	keyType := func(name, typ string) rejectCase {
		return rejectCase{
			name:     "key type " + name,
			setup:    `CREATE TABLE app.t (id ` + typ + ` PRIMARY KEY, v text)`,
			call:     reg("app.t"),
			state:    stateInvalidTableDefinition,
			relation: "app.t",
			rule:     `primary-key column "id" has type ` + typ + `, which is not a portable key type`,
		}
	}
	runRejectCases(t, []rejectCase{
		{
			name:  "no primary key",
			setup: `CREATE TABLE app.t (id int, v text)`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "it has no primary key",
		},
		{
			name:  "unique constraint is not a primary key",
			setup: `CREATE TABLE app.t (id int NOT NULL UNIQUE, v text)`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "it has no primary key",
		},
		{
			name:  "composite primary key",
			setup: `CREATE TABLE app.t (a int, b int, PRIMARY KEY (a, b))`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "composite primary key (2 columns) is not supported",
		},
		{
			name:  "deferrable primary key",
			setup: `CREATE TABLE app.t (id int, CONSTRAINT t_pk PRIMARY KEY (id) DEFERRABLE)`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: `deferrable primary key "t_pk" is not supported`,
		},
		{
			name:  "initially deferred primary key",
			setup: `CREATE TABLE app.t (id int, CONSTRAINT t_pk PRIMARY KEY (id) DEFERRABLE INITIALLY DEFERRED)`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: `deferrable primary key "t_pk" is not supported`,
		},
		keyType("double precision", "double precision"),
		keyType("real", "real"),
		keyType("numeric", "numeric"),
		keyType("timestamp", "timestamp without time zone"),
		keyType("timestamptz", "timestamp with time zone"),
		keyType("jsonb", "jsonb"),
		keyType("date", "date"),
		keyType("bytea", "bytea"),
		{
			name:  "replica identity full",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY); ALTER TABLE app.t REPLICA IDENTITY FULL`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "app.t has a replica identity other than DEFAULT",
		},
		{
			name:  "replica identity nothing",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY); ALTER TABLE app.t REPLICA IDENTITY NOTHING`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "app.t has a replica identity other than DEFAULT",
		},
		{
			name: "replica identity using index",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, code text NOT NULL);
				CREATE UNIQUE INDEX t_code ON app.t (code);
				ALTER TABLE app.t REPLICA IDENTITY USING INDEX t_code`,
			call: reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "app.t has a replica identity other than DEFAULT",
		},
		{
			name: "replica identity using the primary-key index",
			setup: `CREATE TABLE app.t (id int CONSTRAINT t_pk PRIMARY KEY);
				ALTER TABLE app.t REPLICA IDENTITY USING INDEX t_pk`,
			call: reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "app.t has a replica identity other than DEFAULT",
		},
		{
			name: "partition with replica identity full",
			setup: `CREATE TABLE app.p (id bigint PRIMARY KEY) PARTITION BY RANGE (id);
				CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (100);
				CREATE TABLE app.p2 PARTITION OF app.p FOR VALUES FROM (100) TO (200);
				ALTER TABLE app.p2 REPLICA IDENTITY FULL`,
			call: reg("app.p"), state: stateInvalidTableDefinition, relation: "app.p ",
			rule: "app.p2 has a replica identity other than DEFAULT",
		},
		{
			name: "partition with replica identity nothing",
			setup: `CREATE TABLE app.p (id bigint PRIMARY KEY) PARTITION BY RANGE (id);
				CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (100);
				ALTER TABLE app.p1 REPLICA IDENTITY NOTHING`,
			call: reg("app.p"), state: stateInvalidTableDefinition, relation: "app.p ",
			rule: "app.p1 has a replica identity other than DEFAULT",
		},
		{
			name: "sub-partition with replica identity using index",
			setup: `CREATE TABLE app.p (id bigint PRIMARY KEY, code text NOT NULL) PARTITION BY RANGE (id);
				CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (100) PARTITION BY RANGE (id);
				CREATE TABLE app.p1a PARTITION OF app.p1 FOR VALUES FROM (0) TO (50);
				CREATE UNIQUE INDEX p1a_code ON app.p1a (code);
				ALTER TABLE app.p1a REPLICA IDENTITY USING INDEX p1a_code`,
			call: reg("app.p"), state: stateInvalidTableDefinition, relation: "app.p ",
			rule: "app.p1a has a replica identity other than DEFAULT",
		},
		{
			name:  "view",
			setup: `CREATE TABLE app.base (id int PRIMARY KEY); CREATE VIEW app.t AS SELECT id FROM app.base`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "only tables can be registered (this is a view)",
		},
		{
			name:  "materialized view",
			setup: `CREATE MATERIALIZED VIEW app.t AS SELECT 1 AS id`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "only tables can be registered (this is a materialized view)",
		},
		{
			name:  "unlogged table",
			setup: `CREATE UNLOGGED TABLE app.t (id int PRIMARY KEY)`,
			call:  reg("app.t"), state: stateInvalidTableDefinition, relation: "app.t",
			rule: "unlogged tables are not written to WAL",
		},
		{
			name: "partition instead of its root",
			setup: `CREATE TABLE app.p (id bigint PRIMARY KEY) PARTITION BY RANGE (id);
				CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (100)`,
			call: reg("app.p1"), state: stateInvalidTableDefinition, relation: "app.p1",
			rule: "it is a partition; register its partitioned root table",
		},
	})
}

// TestRegisterTableRejectsOptions covers the options argument of synchro.register_table.
func TestRegisterTableRejectsOptions(t *testing.T) {
	const table = `CREATE TABLE app.t (id int PRIMARY KEY, title text, body text,
		updated_at timestamptz, deleted_at timestamp, loc point, tags int[])`
	reg := func(options string) string {
		return `SELECT synchro.register_table('app.t', ` + sharedRule + `, '` + options + `')`
	}
	runRejectCases(t, []rejectCase{
		{
			name: "unknown option key", setup: table, call: reg(`{"exclude_columns":["loc","tags"],"sync_column":["title"]}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `unknown key "sync_column" in options`,
		},
		{
			name: "options not an object", setup: table, call: reg(`["title"]`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "options must be a JSON object",
		},
		{
			name: "sync_columns and exclude_columns together", setup: table,
			call:  reg(`{"sync_columns":["title"],"exclude_columns":["loc","tags"]}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "sync_columns and exclude_columns are mutually exclusive",
		},
		{
			name: "unknown column in sync_columns", setup: table, call: reg(`{"sync_columns":["title","nope"]}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `options.sync_columns names unknown column "nope"`,
		},
		{
			name: "unknown column in exclude_columns", setup: table, call: reg(`{"exclude_columns":["loc","tags","nope"]}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `options.exclude_columns names unknown column "nope"`,
		},
		{
			name: "sync_columns not an array of names", setup: table, call: reg(`{"sync_columns":"title"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "options.sync_columns must be an array of column names",
		},
		{
			name: "exclude_columns containing the key", setup: table, call: reg(`{"exclude_columns":["loc","tags","id"]}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `exclude_columns may not exclude the primary-key column "id"`,
		},
		{
			name: "push_policy not enabled or read_only", setup: table,
			call:  reg(`{"exclude_columns":["loc","tags"],"push_policy":"write_only"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `options.push_policy must be "enabled" or "read_only", not "write_only"`,
		},
		{
			name: "updated_at_column not a timestamp", setup: table,
			call:  reg(`{"exclude_columns":["loc","tags"],"updated_at_column":"title"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `options.updated_at_column column "title" must be a timestamp column`,
		},
		{
			name: "updated_at_column not synced", setup: table,
			call:  reg(`{"exclude_columns":["loc","tags","updated_at"],"updated_at_column":"updated_at"}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `options.updated_at_column names "updated_at", which is not a synced column`,
		},
		{
			name: "updated_at_column unknown", setup: table,
			call:  reg(`{"exclude_columns":["loc","tags"],"updated_at_column":"modified"}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `options.updated_at_column names "modified", which is not a synced column`,
		},
		{
			name: "deleted_at_column not a timestamp", setup: table,
			call:  reg(`{"sync_columns":["title"],"deleted_at_column":"id"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `options.deleted_at_column column "id" must be a timestamp column`,
		},
		{
			name: "deleted_at_column not synced", setup: table,
			call:  reg(`{"sync_columns":["title"],"deleted_at_column":"deleted_at"}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `options.deleted_at_column names "deleted_at", which is not a synced column`,
		},
		{
			name: "non-portable sync column point", setup: table, call: reg(`{"exclude_columns":["tags"]}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `column "loc" has type point, which has no portable type`,
		},
		{
			name: "non-portable sync column int array", setup: table, call: reg(`{"exclude_columns":["loc"]}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `column "tags" has type integer[], which has no portable type`,
		},
		{
			name: "non-portable column synced by default", setup: table, call: reg(`{}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `column "loc" has type point, which has no portable type`,
		},
		{
			name: "non-portable column named in sync_columns", setup: table, call: reg(`{"sync_columns":["title","tags"]}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `column "tags" has type integer[], which has no portable type`,
		},
		{
			name: "invalid wire name", setup: table, call: reg(`{"exclude_columns":["loc","tags"],"name":"1-docs"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `wire name "1-docs" must be a letter or underscore`,
		},
		{
			name: "wire name already used",
			setup: table + `; CREATE TABLE app.u (id int PRIMARY KEY);
				SELECT synchro.register_table('app.u', ` + sharedRule + `, '{"name":"docs"}')`,
			call:  reg(`{"exclude_columns":["loc","tags"],"name":"docs"}`),
			state: stateDuplicateObject, relation: "app.t", rule: `wire name "docs" is already used by another registered table`,
		},
		// The client SDK stores each synced table in SQLite under its wire
		// name: SQLite compares names ignoring case, reserves "sqlite_" and
		// the SDK keeps its own tables under "_synchro_".
		{
			name: "wire name differing only in case from one used",
			setup: table + `; CREATE TABLE app.u (id int PRIMARY KEY);
				SELECT synchro.register_table('app.u', ` + sharedRule + `, '{"name":"docs"}')`,
			call:  reg(`{"exclude_columns":["loc","tags"],"name":"Docs"}`),
			state: stateDuplicateObject, relation: "app.t", rule: `wire name "Docs" is already used by another registered table (wire names are compared ignoring case)`,
		},
		{
			name: "relation name differing only in case from a wire name used",
			setup: `CREATE TABLE app.notes (id int PRIMARY KEY); CREATE TABLE app."Notes" (id int PRIMARY KEY);
				SELECT synchro.register_table('app.notes', ` + sharedRule + `)`,
			call:  `SELECT synchro.register_table('app."Notes"', ` + sharedRule + `)`,
			state: stateDuplicateObject, relation: `app."Notes"`, rule: `wire name "Notes" is already used by another registered table (wire names are compared ignoring case)`,
		},
		{
			name: "wire name in the client's own namespace", setup: table,
			call:  reg(`{"exclude_columns":["loc","tags"],"name":"_synchro_queue"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `wire name "_synchro_queue" may not start with "_synchro_" or "sqlite_"`,
		},
		{
			name:  "relation name in SQLite's reserved namespace",
			setup: `CREATE TABLE app."SQLite_stat1" (id int PRIMARY KEY)`,
			call:  `SELECT synchro.register_table('app."SQLite_stat1"', ` + sharedRule + `)`,
			state: stateInvalidParameterValue, relation: `app."SQLite_stat1"`, rule: `wire name "SQLite_stat1" may not start with "_synchro_" or "sqlite_"`,
		},
		{
			name: "null wire name", setup: table, call: reg(`{"exclude_columns":["loc","tags"],"name":null}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "options.name must be a string",
		},
		{
			name: "wire name not a string", setup: table, call: reg(`{"exclude_columns":["loc","tags"],"name":true}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "options.name must be a string",
		},
		{
			name: "null push_policy", setup: table, call: reg(`{"exclude_columns":["loc","tags"],"push_policy":null}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: "options.push_policy must be a string",
		},
	})
}

// TestRegisterTableRejectsScopeRules covers synchro.compile_scope_rule through
// synchro.register_table.
func TestRegisterTableRejectsScopeRules(t *testing.T) {
	const tables = `CREATE TABLE app.orgs (id text PRIMARY KEY, name text);
		CREATE TABLE app.t (id int PRIMARY KEY, owner_id text, org_id text REFERENCES app.orgs, free_org text)`
	reg := func(rule string) string { return `SELECT synchro.register_table('app.t', '` + rule + `')` }
	runRejectCases(t, []rejectCase{
		{
			name: "scope rule not an object", setup: tables, call: reg(`"shared"`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `scope_rule must be an object with a "kind"`,
		},
		{
			name: "missing kind", setup: tables, call: reg(`{"scope":"all"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `scope_rule must be an object with a "kind"`,
		},
		{
			name: "unknown kind", setup: tables, call: reg(`{"kind":"everyone"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `unknown scope_rule kind "everyone"`,
		},
		{
			name: "unknown key in a rule", setup: tables, call: reg(`{"kind":"shared","scope":"all","template":"x:{id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `unknown key "template" in scope_rule`,
		},
		{
			name: "shared rule without scope", setup: tables, call: reg(`{"kind":"shared"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `shared scope_rule needs a non-empty "scope"`,
		},
		{
			name: "shared rule with empty scope", setup: tables, call: reg(`{"kind":"shared","scope":""}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `shared scope_rule needs a non-empty "scope"`,
		},
		{
			name: "column template with an unknown column", setup: tables, call: reg(`{"kind":"column","template":"user:{nope}"}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `column scope_rule template names unknown column "nope"`,
		},
		{
			name: "column template without placeholder", setup: tables, call: reg(`{"kind":"column","template":"user:all"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `column scope_rule template "user:all" must contain {column} placeholders`,
		},
		{
			name: "column template with a stray brace", setup: tables, call: reg(`{"kind":"column","template":"user:{owner_id}}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `must contain {column} placeholders and no other braces`,
		},
		{
			name: "column rule without template", setup: tables, call: reg(`{"kind":"column"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `column scope_rule needs a non-empty "template"`,
		},
		{
			name: "path rule with an empty path", setup: tables, call: reg(`{"kind":"path","path":[],"template":"org:{id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `path scope_rule needs a non-empty "path" array`,
		},
		{
			name: "path column without a foreign key", setup: tables, call: reg(`{"kind":"path","path":["free_org"],"template":"org:{id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `path column "free_org" of app.t has 0 single-column foreign keys`,
		},
		{
			name: "path column unknown", setup: tables, call: reg(`{"kind":"path","path":["nope"],"template":"org:{id}"}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `path scope_rule names unknown column "nope"`,
		},
		{
			name:  "path step with a bare references name",
			setup: tables,
			// A same-named table on search_path must not be picked up.
			call:  `SET search_path = app, public; ` + reg(`{"kind":"path","path":[{"column":"free_org","references":"orgs"}],"template":"org:{id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `relation name "orgs" must be schema-qualified`,
		},
		{
			name: "path step referencing a nonexistent relation", setup: tables,
			call:  reg(`{"kind":"path","path":[{"column":"free_org","references":"app.nope"}],"template":"org:{id}"}`),
			state: stateUndefinedTable, relation: "app.t", rule: `relation "app.nope" does not exist`,
		},
		{
			name: "path step object without a column", setup: tables,
			call:  reg(`{"kind":"path","path":[{"references":"app.orgs"}],"template":"org:{id}"}`),
			state: stateUndefinedColumn, relation: "app.t", rule: `path scope_rule names unknown column`,
		},
		{
			name: "path step neither a name nor an object", setup: tables,
			call:  reg(`{"kind":"path","path":[7],"template":"org:{id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `each path step is a column name or {"column"`,
		},
		{
			name: "path template over the last relation with an unknown column", setup: tables,
			call:  reg(`{"kind":"path","path":["org_id"],"template":"org:{owner_id}"}`),
			state: stateUndefinedColumn, relation: "app.orgs", rule: `path scope_rule template names unknown column "owner_id"`,
		},
		{
			name:  "path returning to the table itself",
			setup: tables + `; ALTER TABLE app.t ADD COLUMN parent_id int REFERENCES app.t`,
			call:  reg(`{"kind":"path","path":["parent_id"],"template":"t:{id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `path scope_rule may not return to the table itself`,
		},
		{
			name: "members rule with an unknown relation", setup: tables,
			call:  reg(`{"kind":"members","relation":"app.nope","template":"user:{user_id}"}`),
			state: stateUndefinedTable, relation: "app.t", rule: `members scope_rule: relation "app.nope" does not exist`,
		},
		{
			name:  "members rule with ambiguous foreign keys",
			setup: tables + `; CREATE TABLE app.m (id int PRIMARY KEY, a int REFERENCES app.t, b int REFERENCES app.t, user_id text)`,
			call:  reg(`{"kind":"members","relation":"app.m","template":"user:{user_id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `members relation app.m has 2 single-column foreign keys to it`,
		},
		{
			name:  "members rule without a foreign key",
			setup: tables + `; CREATE TABLE app.m (id int PRIMARY KEY, t_id int, user_id text)`,
			call:  reg(`{"kind":"members","relation":"app.m","template":"user:{user_id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `members relation app.m has 0 single-column foreign keys to it`,
		},
		{
			name:  "members rule naming an unknown column",
			setup: tables + `; CREATE TABLE app.m (id int PRIMARY KEY, t_id int, user_id text)`,
			call:  reg(`{"kind":"members","relation":"app.m","column":"doc_id","template":"user:{user_id}"}`),
			state: stateUndefinedColumn, relation: "app.m", rule: `members scope_rule column names unknown column "doc_id"`,
		},
		{
			name:  "members rule with a null column",
			setup: tables + `; CREATE TABLE app.m (id int PRIMARY KEY, t_id int, user_id text)`,
			call:  reg(`{"kind":"members","relation":"app.m","column":null,"template":"user:{user_id}"}`),
			state: stateUndefinedColumn, relation: "app.m", rule: `members scope_rule column names unknown column`,
		},
		{
			name:  "members rule with a bare relation name",
			setup: tables + `; CREATE TABLE app.m (id int PRIMARY KEY, t_id int REFERENCES app.t, user_id text)`,
			call:  `SET search_path = app; ` + reg(`{"kind":"members","relation":"m","template":"user:{user_id}"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `relation name "m" must be schema-qualified`,
		},
		{
			name: "sql rule without membership", setup: tables, call: reg(`{"kind":"sql"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `sql scope_rule needs a "membership" query`,
		},
		{
			name: "sql rule with an invalid membership query", setup: tables,
			call:  reg(`{"kind":"sql","membership":"SELECT scope FROM app.nope WHERE id = $1->>''id''"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `sql scope_rule membership is not a valid query over one jsonb parameter`,
		},
		{
			name: "sql rule with a syntax error", setup: tables,
			call:  reg(`{"kind":"sql","membership":"SELEKT 1"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `sql scope_rule membership is not a valid query`,
		},
		{
			name: "sql rule with an invalid impact query", setup: tables,
			call:  reg(`{"kind":"sql","membership":"SELECT ''x:'' || ($1->>''id'')","impacts":{"app.orgs":"SELECT nope"}}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `sql scope_rule impact query for app.orgs is not a valid query`,
		},
		{
			// Rules are evaluated over projections as of each transaction, never
			// over live rows (which may already hold later changes).
			name: "sql rule reading a live table", setup: tables + `; CREATE TABLE app.acl (id text PRIMARY KEY, team text)`,
			call:  reg(`{"kind":"sql","membership":"SELECT ''team:'' || a.team FROM app.acl a WHERE a.id = $1->>''acl_id''"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `sql scope_rule membership reads app.acl directly`,
		},
		{
			name: "sql rule reading a live table through a view", setup: tables + `; CREATE TABLE app.acl (id text PRIMARY KEY, team text);
				CREATE VIEW app.acl_view AS SELECT * FROM app.acl`,
			call:  reg(`{"kind":"sql","membership":"SELECT ''team:'' || a.team FROM app.acl_view a WHERE a.id = $1->>''acl_id''"}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `sql scope_rule membership reads app.acl directly`,
		},
		{
			name: "sql rule with an impact query reading a live table", setup: tables + `; CREATE TABLE app.acl (id text PRIMARY KEY, team text)`,
			call: reg(`{"kind":"sql","membership":"SELECT ''team:'' || (a.image->>''team'') FROM synchro.projected(''app.acl'') a WHERE a.key = $1->>''acl_id''",
				"impacts":{"app.acl":"SELECT t.id::text FROM app.t t WHERE t.id::text = $1->>''id''"}}`),
			state: stateInvalidParameterValue, relation: "app.t", rule: `sql scope_rule impact query for app.acl reads app.t directly`,
		},
		{
			name: "sql rule with an impact on an unknown relation", setup: tables,
			call:  reg(`{"kind":"sql","membership":"SELECT ''x:'' || ($1->>''id'')","impacts":{"app.nope":"SELECT 1"}}`),
			state: stateUndefinedTable, relation: "app.t", rule: `relation "app.nope" does not exist`,
		},
	})
}

// TestRegistrationRejectsChangesAndDrift covers re-registration, promotion of a
// dependency and relation drift (a relation dropped and recreated under the same
// qualified name).
func TestRegistrationRejectsChangesAndDrift(t *testing.T) {
	runRejectCases(t, []rejectCase{
		{
			name: "re-registering with a different scope rule",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, owner_id text);
				SELECT synchro.register_table('app.t', ` + sharedRule + `)`,
			call:  `SELECT synchro.register_table('app.t', '{"kind":"column","template":"user:{owner_id}"}')`,
			state: stateObjectInUse, relation: "app.t", rule: "already registered with a different scope rule or options",
		},
		{
			name: "re-registering with different options",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, owner_id text);
				SELECT synchro.register_table('app.t', ` + sharedRule + `)`,
			call:  `SELECT synchro.register_table('app.t', ` + sharedRule + `, '{"push_policy":"read_only"}')`,
			state: stateObjectInUse, relation: "app.t", rule: "already registered with a different scope rule or options",
		},
		{
			name: "registering a capture dependency as a synced table",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, owner_id text);
				SELECT synchro.register_dependency('app.t')`,
			call:  `SELECT synchro.register_table('app.t', ` + sharedRule + `)`,
			state: stateObjectInUse, relation: "app.t", rule: "it is registered as a capture dependency",
		},
		{
			name: "drift: synced table dropped and recreated",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, owner_id text);
				SELECT synchro.register_table('app.t', ` + sharedRule + `);
				DROP TABLE app.t;
				CREATE TABLE app.t (id int PRIMARY KEY, owner_id text)`,
			call:  `SELECT synchro.register_table('app.t', ` + sharedRule + `)`,
			state: stateObjectInUse, relation: "app.t", rule: "registered under another OID (dropped and recreated); this is relation drift",
		},
		{
			name: "drift: synced table recreated and registered under a new wire name",
			setup: `CREATE TABLE app.t (id int PRIMARY KEY, owner_id text);
				SELECT synchro.register_table('app.t', ` + sharedRule + `);
				DROP TABLE app.t;
				CREATE TABLE app.t (id int PRIMARY KEY, owner_id text)`,
			call:  `SELECT synchro.register_table('app.t', ` + sharedRule + `, '{"name":"t2"}')`,
			state: stateObjectInUse, relation: "app.t", rule: "this is relation drift",
		},
		{
			name: "drift: dependency dropped and recreated",
			setup: `CREATE TABLE app.m (id int PRIMARY KEY, user_id text);
				SELECT synchro.register_dependency('app.m');
				DROP TABLE app.m;
				CREATE TABLE app.m (id int PRIMARY KEY, user_id text)`,
			call:  `SELECT synchro.register_dependency('app.m')`,
			state: stateObjectInUse, relation: "app.m", rule: "this is relation drift",
		},
		{
			name: "drift: path target dropped and recreated",
			setup: `CREATE TABLE app.orgs (id text PRIMARY KEY);
				CREATE TABLE app.a (id int PRIMARY KEY, org_id text REFERENCES app.orgs);
				SELECT synchro.register_table('app.a', '{"kind":"path","path":["org_id"],"template":"org:{id}"}');
				DROP TABLE app.orgs CASCADE;
				CREATE TABLE app.orgs (id text PRIMARY KEY);
				CREATE TABLE app.b (id int PRIMARY KEY, org_id text REFERENCES app.orgs)`,
			call:  `SELECT synchro.register_table('app.b', '{"kind":"path","path":["org_id"],"template":"org:{id}"}')`,
			state: stateObjectInUse, relation: "app.orgs", rule: "this is relation drift",
		},
	})
}

// TestRegisterDependencyRejects covers synchro.register_dependency's own rules and
// its capture identity validation.
func TestRegisterDependencyRejects(t *testing.T) {
	const table = `CREATE TABLE app.m (id bigint PRIMARY KEY, doc_id text, user_id text)`
	runRejectCases(t, []rejectCase{
		{
			name: "unknown option key", setup: table, call: `SELECT synchro.register_dependency('app.m', '{"cols":["user_id"]}')`,
			state: stateInvalidParameterValue, relation: "app.m", rule: `unknown key "cols" in options`,
		},
		{
			name: "unknown column", setup: table, call: `SELECT synchro.register_dependency('app.m', '{"columns":["user_id","nope"]}')`,
			state: stateUndefinedColumn, relation: "app.m", rule: `options.columns names unknown column "nope"`,
		},
		{
			name: "columns not an array", setup: table, call: `SELECT synchro.register_dependency('app.m', '{"columns":"user_id"}')`,
			state: stateInvalidParameterValue, relation: "app.m", rule: `options.columns must be an array of column names`,
		},
		{
			name: "no primary key", setup: `CREATE TABLE app.m (id bigint, user_id text)`,
			call:  `SELECT synchro.register_dependency('app.m')`,
			state: stateInvalidTableDefinition, relation: "app.m", rule: "it has no primary key",
		},
		{
			name: "view", setup: table + `; CREATE VIEW app.v AS SELECT * FROM app.m`,
			call:  `SELECT synchro.register_dependency('app.v')`,
			state: stateInvalidTableDefinition, relation: "app.v", rule: "only tables can be registered (this is a view)",
		},
		{
			name: "replica identity full", setup: table + `; ALTER TABLE app.m REPLICA IDENTITY FULL`,
			call:  `SELECT synchro.register_dependency('app.m')`,
			state: stateInvalidTableDefinition, relation: "app.m", rule: "app.m has a replica identity other than DEFAULT",
		},
		{
			name:  "already captured without a requested column",
			setup: table + `; SELECT synchro.register_dependency('app.m', '{"columns":["doc_id"]}')`,
			call:  `SELECT synchro.register_dependency('app.m', '{"columns":["doc_id","user_id"]}')`,
			state: stateInvalidParameterValue, relation: "app.m", rule: `column "user_id" of relation app.m is not captured by its registration`,
		},
		{
			name: "members rule over a dependency that does not capture its columns",
			setup: table + `; SELECT synchro.register_dependency('app.m', '{"columns":["doc_id"]}');
				CREATE TABLE app.docs (id text PRIMARY KEY); ALTER TABLE app.m ADD FOREIGN KEY (doc_id) REFERENCES app.docs`,
			call:  `SELECT synchro.register_table('app.docs', '{"kind":"members","relation":"app.m","template":"user:{user_id}"}')`,
			state: stateInvalidParameterValue, relation: "app.m", rule: `column "user_id" of relation app.m is not captured by its registration`,
		},
		{
			name: "path rule over a dependency that does not capture its columns",
			setup: `CREATE TABLE app.orgs (id text PRIMARY KEY, slug text);
				CREATE TABLE app.projects (id int PRIMARY KEY, org_id text REFERENCES app.orgs, title text);
				CREATE TABLE app.tasks (id int PRIMARY KEY, project_id int REFERENCES app.projects);
				SELECT synchro.register_dependency('app.projects', '{"columns":["title"]}')`,
			call:  `SELECT synchro.register_table('app.tasks', '{"kind":"path","path":["project_id","org_id"],"template":"org:{slug}"}')`,
			state: stateInvalidParameterValue, relation: "app.projects", rule: `column "org_id" of relation app.projects is not captured by its registration`,
		},
		{
			name: "path template over a dependency that does not capture its column",
			setup: `CREATE TABLE app.orgs (id text PRIMARY KEY, slug text);
				CREATE TABLE app.projects (id int PRIMARY KEY, org_id text REFERENCES app.orgs);
				SELECT synchro.register_dependency('app.orgs', '{"columns":["id"]}')`,
			call:  `SELECT synchro.register_table('app.projects', '{"kind":"path","path":["org_id"],"template":"org:{slug}"}')`,
			state: stateInvalidParameterValue, relation: "app.orgs", rule: `column "slug" of relation app.orgs is not captured by its registration`,
		},
	})
}

func TestRegisterTableIdenticalCallIsNoOp(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.t (id int PRIMARY KEY, owner_id text, secret text)`)
	const options = `{"exclude_columns":["secret"],"push_policy":"read_only"}`
	id := registerTable(t, d, "app.t", `{"kind":"column","template":"user:{owner_id}"}`, options)
	gens := generationCount(t, d)
	rels := queryInt(t, d, `SELECT count(*) FROM synchro.relation`)

	// The same call, spelled differently (key order, quoting), is the same registration.
	again := registerTable(t, d, `"app"."t"`, `{"template":"user:{owner_id}","kind":"column"}`,
		`{"push_policy":"read_only","exclude_columns":["secret"]}`)
	if again != id {
		t.Fatalf("identical registration returned table id %d, first %d", again, id)
	}
	if got := generationCount(t, d); got != gens {
		t.Fatalf("identical registration created %d registry generation(s)", got-gens)
	}
	if got := queryInt(t, d, `SELECT count(*) FROM synchro.relation`); got != rels {
		t.Fatalf("identical registration changed the relation count from %d to %d", rels, got)
	}
	// Triggers were not installed twice.
	requireCaptured(t, d, "app.t")

	// Repeating register_dependency on a captured relation returns its relation_id.
	d.Exec(t, `CREATE TABLE app.m (id int PRIMARY KEY, user_id text)`)
	rid := queryInt(t, d, `SELECT synchro.register_dependency('app.m', '{"columns":["user_id"]}')`)
	gens = generationCount(t, d)
	for _, call := range []string{
		`SELECT synchro.register_dependency('app.m', '{"columns":["user_id"]}')`,
		`SELECT synchro.register_dependency('app.m', '{"columns":[]}')`,
	} {
		if got := queryInt(t, d, call); got != rid {
			t.Fatalf("%s returned %d, want %d", call, got, rid)
		}
	}
	// A synced table captures its key and synced columns for dependents as well.
	if got := queryInt(t, d, `SELECT synchro.register_dependency('app.t', '{"columns":["owner_id"]}')`); got != relationID(t, d, "app.t") {
		t.Fatalf("register_dependency of a synced table returned %d", got)
	}
	if got := generationCount(t, d); got != gens {
		t.Fatalf("repeated register_dependency created %d registry generation(s)", got-gens)
	}
}

func TestRegisterTableKeyTypes(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app`)
	for _, tc := range []struct {
		name, typ, want string
	}{
		{"k_text", "text", "string"},
		{"k_varchar", "varchar(40)", "string"},
		{"k_varchar_unbounded", "character varying", "string"},
		{"k_uuid", "uuid", "string"},
		{"k_smallint", "smallint", "int"},
		{"k_integer", "integer", "int"},
		{"k_serial", "serial", "int"},
		{"k_bigint", "bigint", "int64"},
		{"k_bigserial", "bigserial", "int64"},
	} {
		rel := "app." + tc.name
		d.Exec(t, `CREATE TABLE `+rel+` (note text, id `+tc.typ+` PRIMARY KEY)`)
		gens := generationCount(t, d)
		id := registerTable(t, d, rel, `{"kind":"shared","scope":"all"}`, `{}`)
		var keyColumn, keyType, wire string
		err := d.Pool.QueryRow(context.Background(), `
			SELECT r.key_column, r.key_type, t.name FROM synchro.relation r
			JOIN synchro.synced_table t USING (relation_id)
			WHERE r.relation_oid = $1::regclass AND t.table_id = $2`, rel, id).Scan(&keyColumn, &keyType, &wire)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if keyColumn != "id" || keyType != tc.want || wire != tc.name {
			t.Fatalf("%s (%s): key %s %s, wire name %s; want id %s, %s", rel, tc.typ, keyColumn, keyType, wire, tc.want, tc.name)
		}
		if got := generationCount(t, d); got != gens+1 {
			t.Fatalf("%s: %d new registry generations, want 1", rel, got-gens)
		}
		requireCaptured(t, d, rel)
	}
}

func TestRegisterTableRecordsColumnsAndOptions(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (title text, id uuid PRIMARY KEY, owner_id text, loc point,
			updated_at timestamptz, deleted_at timestamp, body text);
		CREATE TABLE app.notes (id int PRIMARY KEY, body text, owner_id text, extra jsonb)`)

	// exclude_columns: everything else in column order, the non-portable column left out.
	registerTable(t, d, "app.docs", `{"kind":"column","template":"user:{owner_id}"}`,
		`{"name":"documents","exclude_columns":["loc","body"],"push_policy":"read_only",
		  "updated_at_column":"updated_at","deleted_at_column":"deleted_at"}`)
	var wire, policy, updatedAt, deletedAt string
	var syncCols, captured []string
	err := d.Pool.QueryRow(context.Background(), `
		SELECT t.name, t.push_policy, t.updated_at_column, t.deleted_at_column, t.sync_columns::text[], r.columns::text[]
		FROM synchro.synced_table t JOIN synchro.relation r USING (relation_id)
		WHERE r.relation_oid = 'app.docs'::regclass`).Scan(&wire, &policy, &updatedAt, &deletedAt, &syncCols, &captured)
	if err != nil {
		t.Fatal(err)
	}
	if wire != "documents" || policy != "read_only" || updatedAt != "updated_at" || deletedAt != "deleted_at" {
		t.Fatalf("options recorded as name=%s push_policy=%s updated_at=%s deleted_at=%s", wire, policy, updatedAt, deletedAt)
	}
	if want := []string{"title", "id", "owner_id", "updated_at", "deleted_at"}; !slices.Equal(syncCols, want) {
		t.Fatalf("sync_columns %v, want %v", syncCols, want)
	}
	if want := []string{"deleted_at", "id", "owner_id", "title", "updated_at"}; !slices.Equal(captured, want) {
		t.Fatalf("captured columns %v, want %v", captured, want)
	}

	// sync_columns: the key is always synced; the scope rule's columns are captured too.
	registerTable(t, d, "app.notes", `{"kind":"column","template":"user:{owner_id}"}`, `{"sync_columns":["body"]}`)
	err = d.Pool.QueryRow(context.Background(), `
		SELECT t.name, t.push_policy, t.sync_columns::text[], r.columns::text[]
		FROM synchro.synced_table t JOIN synchro.relation r USING (relation_id)
		WHERE r.relation_oid = 'app.notes'::regclass`).Scan(&wire, &policy, &syncCols, &captured)
	if err != nil {
		t.Fatal(err)
	}
	if wire != "notes" || policy != "enabled" {
		t.Fatalf("defaults recorded as name=%s push_policy=%s", wire, policy)
	}
	if want := []string{"id", "body"}; !slices.Equal(syncCols, want) {
		t.Fatalf("sync_columns %v, want %v", syncCols, want)
	}
	if want := []string{"body", "id", "owner_id"}; !slices.Equal(captured, want) {
		t.Fatalf("captured columns %v, want %v", captured, want)
	}
}

func TestRegisterTablePathRuleRegistersDependencies(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.orgs (id text PRIMARY KEY, name text);
		CREATE TABLE app.projects (id bigint PRIMARY KEY, org_id text REFERENCES app.orgs, title text);
		CREATE TABLE app.tasks (id uuid PRIMARY KEY, project_id bigint REFERENCES app.projects, title text, secret text)`)
	gens := generationCount(t, d)

	id := registerTable(t, d, "app.tasks",
		`{"kind":"path","path":["project_id",{"column":"org_id","references":"app.orgs"}],"template":"org:{id}"}`,
		`{"exclude_columns":["project_id","secret"]}`)

	if got := generationCount(t, d); got != gens+1 {
		t.Fatalf("%d new registry generations, want exactly 1", got-gens)
	}
	g := maxGeneration(t, d)
	if reason := queryText(t, d, `SELECT reason FROM synchro.registry_generation WHERE generation = $1`, g); reason != "register_table app.tasks" {
		t.Fatalf("generation reason %q", reason)
	}
	kinds := map[string]string{"app.tasks": "synced", "app.projects": "capture_dependency", "app.orgs": "capture_dependency"}
	for rel, kind := range kinds {
		var gotKind string
		var gotGen int64
		if err := d.Pool.QueryRow(context.Background(), `SELECT registration_kind, generation FROM synchro.relation
			WHERE relation_oid = $1::regclass`, rel).Scan(&gotKind, &gotGen); err != nil {
			t.Fatalf("%s not registered: %v", rel, err)
		}
		if gotKind != kind || gotGen != g {
			t.Fatalf("%s registered as %s in generation %d, want %s in %d", rel, gotKind, gotGen, kind, g)
		}
		requireCaptured(t, d, rel)
	}
	// Dependencies are captured whole; the synced table captures what the rule reads.
	if cols := queryStrings(t, d, `SELECT columns::text[] FROM synchro.relation WHERE relation_oid = 'app.projects'::regclass`); !slices.Equal(cols, []string{"id", "org_id", "title"}) {
		t.Fatalf("app.projects captures %v", cols)
	}
	if cols := queryStrings(t, d, `SELECT columns::text[] FROM synchro.relation WHERE relation_oid = 'app.tasks'::regclass`); !slices.Equal(cols, []string{"id", "project_id", "title"}) {
		t.Fatalf("app.tasks captures %v", cols)
	}
	if cols := queryStrings(t, d, `SELECT sync_columns::text[] FROM synchro.synced_table WHERE table_id = $1`, id); !slices.Equal(cols, []string{"id", "title"}) {
		t.Fatalf("app.tasks syncs %v", cols)
	}

	// The normalized rule names the hops by immutable relation_id.
	var rule struct {
		Kind string `json:"kind"`
		Path []struct {
			Column     string `json:"column"`
			RelationID int64  `json:"relation_id"`
			Relation   string `json:"relation"`
		} `json:"path"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal([]byte(queryText(t, d, `SELECT scope_rule::text FROM synchro.synced_table WHERE table_id = $1`, id)), &rule); err != nil {
		t.Fatal(err)
	}
	if rule.Kind != "path" || rule.Template != "org:{id}" || len(rule.Path) != 2 ||
		rule.Path[0].Column != "project_id" || rule.Path[0].RelationID != relationID(t, d, "app.projects") || rule.Path[0].Relation != "app.projects" ||
		rule.Path[1].Column != "org_id" || rule.Path[1].RelationID != relationID(t, d, "app.orgs") || rule.Path[1].Relation != "app.orgs" {
		t.Fatalf("normalized path rule %+v", rule)
	}

	// A second rule over the same targets reuses their registrations.
	d.Exec(t, `CREATE TABLE app.milestones (id int PRIMARY KEY, org_id text REFERENCES app.orgs)`)
	rels := queryInt(t, d, `SELECT count(*) FROM synchro.relation`)
	gens = generationCount(t, d)
	registerTable(t, d, "app.milestones", `{"kind":"path","path":["org_id"],"template":"org:{name}"}`, `{}`)
	if got := queryInt(t, d, `SELECT count(*) FROM synchro.relation`); got != rels+1 {
		t.Fatalf("%d relations registered, want only app.milestones", got-rels)
	}
	if got := generationCount(t, d); got != gens+1 {
		t.Fatalf("%d new registry generations, want exactly 1", got-gens)
	}
	if got := queryInt(t, d, `SELECT (scope_rule->'path'->0->>'relation_id')::bigint FROM synchro.synced_table WHERE name = 'milestones'`); got != relationID(t, d, "app.orgs") {
		t.Fatalf("second path rule names relation %d, want app.orgs %d", got, relationID(t, d, "app.orgs"))
	}
}

func TestRegisterTableMembersRuleRegistersMembership(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id text PRIMARY KEY, title text);
		CREATE TABLE app.doc_members (id bigint PRIMARY KEY, doc_id text REFERENCES app.docs, user_id text, role text);
		CREATE TABLE app.sheets (id text PRIMARY KEY);
		CREATE TABLE app.sheet_members (id bigint PRIMARY KEY, sheet_id text REFERENCES app.sheets,
			invited_by text REFERENCES app.sheets, user_id text)`)
	gens := generationCount(t, d)
	id := registerTable(t, d, "app.docs", `{"kind":"members","relation":"app.doc_members","template":"user:{user_id}"}`, `{}`)
	if got := generationCount(t, d); got != gens+1 {
		t.Fatalf("%d new registry generations, want exactly 1", got-gens)
	}
	g := maxGeneration(t, d)
	if kind := queryText(t, d, `SELECT registration_kind FROM synchro.relation WHERE relation_oid = 'app.doc_members'::regclass AND generation = $1`, g); kind != "capture_dependency" {
		t.Fatalf("app.doc_members registered as %s", kind)
	}
	requireCaptured(t, d, "app.docs")
	requireCaptured(t, d, "app.doc_members")
	if cols := queryStrings(t, d, `SELECT columns::text[] FROM synchro.relation WHERE relation_oid = 'app.doc_members'::regclass`); !slices.Equal(cols, []string{"doc_id", "id", "role", "user_id"}) {
		t.Fatalf("app.doc_members captures %v", cols)
	}
	var rule struct {
		Kind, Column, Template, Relation string
		RelationID                       int64 `json:"relation_id"`
	}
	if err := json.Unmarshal([]byte(queryText(t, d, `SELECT scope_rule::text FROM synchro.synced_table WHERE table_id = $1`, id)), &rule); err != nil {
		t.Fatal(err)
	}
	if rule.Kind != "members" || rule.Column != "doc_id" || rule.Template != "user:{user_id}" ||
		rule.Relation != "app.doc_members" || rule.RelationID != relationID(t, d, "app.doc_members") {
		t.Fatalf("normalized members rule %+v", rule)
	}

	// With two foreign keys, naming the column disambiguates.
	registerTable(t, d, "app.sheets", `{"kind":"members","relation":"app.sheet_members","column":"sheet_id","template":"user:{user_id}"}`, `{}`)
	if col := queryText(t, d, `SELECT scope_rule->>'column' FROM synchro.synced_table WHERE name = 'sheets'`); col != "sheet_id" {
		t.Fatalf("members column %q", col)
	}
	requireCaptured(t, d, "app.sheet_members")
}

func TestRegisterDependencyCreatesOneGeneration(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.acl (user_id text, id bigint PRIMARY KEY, scope text, note text)`)
	gens := generationCount(t, d)
	rid := queryInt(t, d, `SELECT synchro.register_dependency('app.acl', '{"columns":["scope","user_id"]}')`)
	if got := generationCount(t, d); got != gens+1 {
		t.Fatalf("%d new registry generations, want exactly 1", got-gens)
	}
	var kind, keyType string
	var cols []string
	var gen int64
	if err := d.Pool.QueryRow(context.Background(), `SELECT registration_kind, key_type, columns::text[], generation
		FROM synchro.relation WHERE relation_id = $1 AND relation_oid = 'app.acl'::regclass`, rid).Scan(&kind, &keyType, &cols, &gen); err != nil {
		t.Fatal(err)
	}
	if kind != "capture_dependency" || keyType != "int64" || !slices.Equal(cols, []string{"id", "scope", "user_id"}) || gen != maxGeneration(t, d) {
		t.Fatalf("dependency recorded as %s %s %v in generation %d", kind, keyType, cols, gen)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.synced_table`); n != 0 {
		t.Fatalf("a dependency got a synced table row")
	}
	requireCaptured(t, d, "app.acl")
}

func TestRegisterSQLRuleRegistersImpacts(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.acl (id bigint PRIMARY KEY, doc_id text, user_id text);
		CREATE TABLE app.docs (id text PRIMARY KEY, title text)`)
	gens := generationCount(t, d)
	id := registerTable(t, d, "app.docs", `{"kind":"sql",
		"membership":"SELECT 'user:' || (a.image->>'user_id') FROM synchro.projected('app.acl') a WHERE a.image->>'doc_id' = $1->>'id'",
		"impacts":{"app.acl":"SELECT $1->>'doc_id'"}}`, `{}`)
	if got := generationCount(t, d); got != gens+1 {
		t.Fatalf("%d new registry generations, want exactly 1", got-gens)
	}
	acl := relationID(t, d, "app.acl")
	if kind := queryText(t, d, `SELECT registration_kind FROM synchro.relation WHERE relation_id = $1`, acl); kind != "capture_dependency" {
		t.Fatalf("app.acl registered as %s", kind)
	}
	if rel := queryText(t, d, `SELECT scope_rule->'impacts'->($2::text)->>'relation' FROM synchro.synced_table WHERE table_id = $1`, id, strconv.FormatInt(acl, 10)); rel != "app.acl" {
		t.Fatalf("impacts keyed by relation_id name %q", rel)
	}
	requireCaptured(t, d, "app.acl")
}

func TestRegisterTableCapturesPartitionedRoot(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.events (id bigint PRIMARY KEY, body text) PARTITION BY RANGE (id);
		CREATE TABLE app.events_1 PARTITION OF app.events FOR VALUES FROM (0) TO (100)`)
	registerTable(t, d, "app.events", `{"kind":"shared","scope":"all"}`, `{}`)
	requireCaptured(t, d, "app.events")
	// Row triggers are cloned to the partitions; the partitions are not registered.
	for _, trig := range []string{"synchro_fence", "synchro_key_guard"} {
		if n := queryInt(t, d, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'app.events_1'::regclass AND tgname = $1`, trig); n != 1 {
			t.Fatalf("partition has no %s trigger", trig)
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.relation WHERE relation_oid = 'app.events_1'::regclass`); n != 0 {
		t.Fatalf("the partition was registered")
	}
}

func TestRegistrationEmitsActivationMessage(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.orgs (id text PRIMARY KEY);
		CREATE TABLE app.docs (id text PRIMARY KEY, org_id text REFERENCES app.orgs);
		CREATE TABLE app.notes (id int PRIMARY KEY);
		CREATE TABLE app.acl (id int PRIMARY KEY);
		CREATE TABLE app.rolled_back (id int PRIMARY KEY)`)
	slot := d.CreateSlot(t)
	g := maxGeneration(t, d)

	// One registration (with a dependency) in one transaction: one generation.
	d.Exec(t, `BEGIN;
		SELECT synchro.register_table('app.docs', '{"kind":"path","path":["org_id"],"template":"org:{id}"}');
		COMMIT`)
	// A rolled-back registration leaves no generation and no message.
	d.Exec(t, `BEGIN;
		SELECT synchro.register_table('app.rolled_back', `+sharedRule+`);
		ROLLBACK`)
	// Two registrations in one transaction: two generations, in order.
	d.Exec(t, `BEGIN;
		SELECT synchro.register_table('app.notes', `+sharedRule+`);
		SELECT synchro.register_dependency('app.acl');
		COMMIT`)

	if got := maxGeneration(t, d); got != g+3 {
		t.Fatalf("max generation %d, want %d", got, g+3)
	}
	requireNotCaptured(t, d, "app.rolled_back")
	var got [][]int64
	for _, txn := range d.Decode(t, slot) {
		if txn.Malformed != nil {
			t.Fatalf("malformed registry message: %v", txn.Malformed)
		}
		if len(txn.Activations) == 0 {
			continue
		}
		if len(txn.Rows) != 0 || len(txn.Fences) != 0 {
			t.Fatalf("registration transaction carries %d row events and %d fences", len(txn.Rows), len(txn.Fences))
		}
		var gens []int64
		for _, a := range txn.Activations {
			gens = append(gens, a.Generation)
		}
		got = append(got, gens)
	}
	if len(got) != 2 || !slices.Equal(got[0], []int64{g + 1}) || !slices.Equal(got[1], []int64{g + 2, g + 3}) {
		t.Fatalf("activations per transaction %v, want [[%d] [%d %d]]", got, g+1, g+2, g+3)
	}
}

func TestSameNameInDifferentSchemasNeverCollides(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA s1; CREATE SCHEMA s2;
		CREATE TABLE s1.orgs (id text PRIMARY KEY, name text);
		CREATE TABLE s2.orgs (id text PRIMARY KEY, name text);
		CREATE TABLE s1.t (id int PRIMARY KEY, org_id text REFERENCES s1.orgs);
		CREATE TABLE s2.t (id int PRIMARY KEY, org_id text REFERENCES s2.orgs)`)
	id1 := registerTable(t, d, "s1.t", `{"kind":"path","path":["org_id"],"template":"org:{id}"}`, `{"name":"t1"}`)
	id2 := registerTable(t, d, "s2.t", `{"kind":"path","path":[{"column":"org_id","references":"s2.orgs"}],"template":"org:{name}"}`, `{"name":"t2"}`)
	if id1 == id2 {
		t.Fatalf("both got table id %d", id1)
	}
	for _, rel := range []string{"s1.t", "s2.t", "s1.orgs", "s2.orgs"} {
		schema, name, _ := strings.Cut(rel, ".")
		var gotSchema, gotName string
		if err := d.Pool.QueryRow(context.Background(), `SELECT schema_name, relation_name FROM synchro.relation
			WHERE relation_oid = $1::regclass`, rel).Scan(&gotSchema, &gotName); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if gotSchema != schema || gotName != name {
			t.Fatalf("%s recorded as %s.%s", rel, gotSchema, gotName)
		}
		requireCaptured(t, d, rel)
	}
	for _, tc := range []struct {
		table int64
		dep   string
	}{{id1, "s1.orgs"}, {id2, "s2.orgs"}} {
		got := queryInt(t, d, `SELECT (scope_rule->'path'->0->>'relation_id')::bigint FROM synchro.synced_table WHERE table_id = $1`, tc.table)
		if got != relationID(t, d, tc.dep) {
			t.Fatalf("table %d: path target %d, want %s (%d)", tc.table, got, tc.dep, relationID(t, d, tc.dep))
		}
	}
}

func TestRegistrationDoesNotUseSearchPath(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE SCHEMA otherschema;
		CREATE TABLE app.t (id int PRIMARY KEY, org_id text);
		CREATE TABLE app.orgs (id text PRIMARY KEY);
		CREATE TABLE app.members (id int PRIMARY KEY, u_id int, user_id text);
		CREATE TABLE otherschema.orgs (id text PRIMARY KEY);
		CREATE TABLE otherschema.t (id int PRIMARY KEY, org_id text);
		CREATE TABLE otherschema.u (id int PRIMARY KEY, org_id text);
		CREATE TABLE otherschema.members (id int PRIMARY KEY, u_id int REFERENCES otherschema.u, user_id text)`)
	ctx := context.Background()
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// search_path names a schema holding same-named tables (and pg_catalog last, so
	// even unqualified catalog lookups could be hijacked by the caller's schemas).
	if _, err := conn.Exec(ctx, `SET search_path = app, public, pg_catalog`); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := conn.QueryRow(ctx, `SELECT synchro.register_table('otherschema.t',
		'{"kind":"path","path":[{"column":"org_id","references":"otherschema.orgs"}],"template":"org:{id}"}',
		'{"name":"other_t"}')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT synchro.register_table('otherschema.u',
		'{"kind":"members","relation":"otherschema.members","column":"u_id","template":"user:{user_id}"}',
		'{"name":"other_u"}')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `RESET search_path`); err != nil {
		t.Fatal(err)
	}

	for _, rel := range []string{"otherschema.t", "otherschema.orgs", "otherschema.members", "otherschema.u"} {
		var schema, name string
		if err := d.Pool.QueryRow(ctx, `SELECT schema_name, relation_name FROM synchro.relation WHERE relation_oid = $1::regclass`, rel).
			Scan(&schema, &name); err != nil {
			t.Fatalf("%s is not registered under its own OID: %v", rel, err)
		}
		if schema+"."+name != rel {
			t.Fatalf("%s recorded as %s.%s", rel, schema, name)
		}
		requireCaptured(t, d, rel)
	}
	for _, rel := range []string{"app.t", "app.orgs", "app.members"} {
		requireNotCaptured(t, d, rel)
	}
	if got := queryText(t, d, `SELECT scope_rule->'path'->0->>'relation' FROM synchro.synced_table WHERE name = 'other_t'`); got != "otherschema.orgs" {
		t.Fatalf("path target %s", got)
	}
}

func TestRegisterQuotedIdentifiers(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA "My App";
		CREATE TABLE "My App"."Org Units" ("Id" text PRIMARY KEY, "Name" text);
		CREATE TABLE "My App"."Work Items" ("Id" bigint PRIMARY KEY, "Unit" text, "Title" text)`)
	registerTable(t, d, `"My App"."Work Items"`,
		`{"kind":"path","path":[{"column":"Unit","references":"\"My App\".\"Org Units\""}],"template":"unit:{Name}"}`,
		`{"name":"work_items"}`)
	for _, rel := range []string{`"My App"."Work Items"`, `"My App"."Org Units"`} {
		requireCaptured(t, d, rel)
	}
	if key := queryText(t, d, `SELECT key_column || ' ' || key_type FROM synchro.relation WHERE relation_oid = '"My App"."Work Items"'::regclass`); key != "Id int64" {
		t.Fatalf("key %s", key)
	}
	// Messages quote such names.
	err := d.ExecErr(`SELECT synchro.register_table('"My App"."Work Items"', '{"kind":"shared","scope":"x"}')`)
	requireRejected(t, err, stateObjectInUse, `"My App"."Work Items"`, "already registered")
}

// TestRenderTemplate: a scope template renders the same whether it has one
// placeholder (rendered inline) or several or none (rendered by the loop), and
// any NULL or missing value makes the whole scope NULL.
func TestRenderTemplate(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	got := rowsOf(t, d, `
		SELECT t, coalesce(synchro.render_template(t, i), '<null>'), coalesce(synchro.render_template_loop(t, i), '<null>')
		FROM (VALUES ('user:{owner}', '{"owner": "u1"}'::jsonb),
		             ('{owner}', '{"owner": "u1"}'),
		             ('{owner}:tail', '{"owner": 7}'),
		             ('org:{org}/team:{team}', '{"org": "o", "team": "t"}'),
		             ('org:{org}/team:{team}', '{"org": "o"}'),
		             ('user:{owner}', '{"owner": null}'),
		             ('user:{owner}', '{}'),
		             ('public', '{}')) AS v(t, i)`)
	want := []string{
		"user:{owner}|user:u1|user:u1",
		"{owner}|u1|u1",
		"{owner}:tail|7:tail|7:tail",
		"org:{org}/team:{team}|org:o/team:t|org:o/team:t",
		"org:{org}/team:{team}|<null>|<null>",
		"user:{owner}|<null>|<null>",
		"user:{owner}|<null>|<null>",
		"public|public|public",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rendered templates:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
