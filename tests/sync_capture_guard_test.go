package tests

// A push must never block capture for everyone. Materialization evaluates,
// in commit order, the scope rules of every synced row a transaction changes
// and of every synced row that a rule reading a changed row points at; an
// error, or a scope id too long for its index entries, makes the transaction
// poison and stops capture before it until an operator steps in. Direct
// writes may do that (the operator's business); a push comes from an end
// user, so push rejects such a mutation on its own as validation_failed:
// its savepoint rolled back, the other mutations of the push applied, a
// message naming the table whose rule it would break and never a value.

import "testing"

// captureGuardSetup: synced tables read by other tables' rules.
//   - reports (sql rule): its owner's scope, "level:" and an integer per grant
//     (a cast of the grant's text column), "label:" and the label of a
//     labelled grant;
//   - sheets (sql rule, bigint keys): the grants naming it by sheet_id, a text
//     column, point at it;
//   - cards (path rule through boards): "team:" and the board's team;
//   - rooms (members rule through room_members): "tag:" and each member's tag;
//   - grants, boards and room_members have their owner's scope.
const captureGuardSetup = `
	CREATE TABLE app.reports (id text PRIMARY KEY, owner_id text NOT NULL);
	CREATE TABLE app.sheets (id bigint PRIMARY KEY, owner_id text NOT NULL);
	CREATE TABLE app.grants (id text PRIMARY KEY, owner_id text NOT NULL, report_id text, sheet_id text, level text, label text);
	CREATE TABLE app.boards (id text PRIMARY KEY, owner_id text NOT NULL, team text);
	CREATE TABLE app.cards (id text PRIMARY KEY, board_id text REFERENCES app.boards);
	CREATE TABLE app.rooms (id text PRIMARY KEY);
	CREATE TABLE app.room_members (id text PRIMARY KEY, room_id text NOT NULL REFERENCES app.rooms, owner_id text NOT NULL, tag text);
	SELECT synchro.register_table('app.grants', '{"kind":"column","template":"user:{owner_id}"}');
	SELECT synchro.register_table('app.boards', '{"kind":"column","template":"user:{owner_id}"}');
	SELECT synchro.register_table('app.room_members', '{"kind":"column","template":"user:{owner_id}"}');
	SELECT synchro.register_table('app.reports', $${"kind":"sql",
		"membership":"SELECT 'user:' || ($1->>'owner_id') UNION ALL SELECT 'level:' || (g.image->>'level')::int FROM synchro.projected('app.grants') g WHERE g.image->>'report_id' = $1->>'id' UNION ALL SELECT 'label:' || (g.image->>'label') FROM synchro.projected('app.grants') g WHERE g.image->>'report_id' = $1->>'id' AND g.image->>'label' IS NOT NULL",
		"impacts":{"app.grants":"SELECT $1->>'report_id'"}}$$);
	SELECT synchro.register_table('app.sheets', $${"kind":"sql",
		"membership":"SELECT 'user:' || ($1->>'owner_id') UNION ALL SELECT 'grant:' || g.key FROM synchro.projected('app.grants') g WHERE g.image->>'sheet_id' = $1->>'id'",
		"impacts":{"app.grants":"SELECT $1->>'sheet_id'"}}$$);
	SELECT synchro.register_table('app.cards', '{"kind":"path","path":["board_id"],"template":"team:{team}"}');
	SELECT synchro.register_table('app.rooms', '{"kind":"members","relation":"app.room_members","column":"room_id","template":"tag:{tag}"}');
	INSERT INTO app.reports VALUES ('r1', 'u2');
	INSERT INTO app.sheets VALUES (1, 'u2');
	INSERT INTO app.grants VALUES ('g1', 'u1', 'r1', '1', '1', NULL);
	INSERT INTO app.boards VALUES ('b1', 'u1', 'red'), ('b2', 'u2', 'blue');
	INSERT INTO app.cards VALUES ('c1', 'b1'), ('c2', 'b2');
	INSERT INTO app.rooms VALUES ('room1');`

// permissivePolicies registers a custom write policy that allows every write
// on every table of captureGuardSetup.
const permissivePolicies = `
	CREATE FUNCTION app.anything(user_id text, op text, table_name text, before jsonb, after jsonb)
		RETURNS boolean LANGUAGE sql AS 'SELECT true';
	SELECT synchro.set_write_policy(t, 'app.anything(text,text,text,jsonb,jsonb)')
	FROM unnest('{app.reports,app.sheets,app.grants,app.boards,app.cards,app.rooms,app.room_members}'::regclass[]) t;`

// captureGuardCase: bad, pushed by u1 ahead of a valid docs insert in the same
// push, would make materialization fail; the rejection names table.
type captureGuardCase struct {
	name   string
	policy bool             // a permissive custom write policy on every table of captureGuardSetup
	before []map[string]any // pushed (and accepted) ahead of bad, in the same push
	bad    map[string]any
	table  string // the synced table whose rule bad would break
	long   bool   // by a scope id longer than synchro.max_scope_bytes() (else by an error)
	value  string // a value of bad the answer must not echo
}

// runCaptureGuard pushes each case in a database of its own, then commits a
// direct write and waits until it is materialized (a poison transaction fails
// the wait at once), and only then checks the outcomes: a case that is not
// guarded shows as blocked capture.
func runCaptureGuard(t *testing.T, cases []captureGuardCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			setup := captureGuardSetup
			if c.policy {
				setup += permissivePolicies
			}
			e := newSyncEnv(t, setup)
			waitCaptureReady(t, e.d)
			e.connect(t, "u1", "c1")
			muts := append(append(append([]map[string]any{}, c.before...), c.bad),
				mut("ok", "docs", "insert", map[string]any{"id": "d-ok"}, map[string]any{"owner_id": "u1"}))
			resp := e.push(t, "u1", "c1", muts...)
			e.d.Exec(t, `INSERT INTO app.docs (id, owner_id) VALUES ('d-later', 'u2')`)
			waitMaterialized(t, e.d)

			o := hostileOutcome(t, resp, "bad", "rejected", "rejected", "validation_failed")
			msg, _ := o["message"].(string)
			want := `the scope rule of table "` + c.table + `" fails on a row this change affects`
			if c.long {
				want = `a row of table "` + c.table + `" would belong to a scope id longer than 1500 bytes`
			}
			if msg != want {
				t.Fatalf("message %q, want %q", msg, want)
			}
			epRequireNoLeak(t, "bad", []byte(mustMarshal(t, o)), c.value)
			for _, m := range c.before {
				hostileOutcome(t, resp, m["mutation_id"].(string), "accepted", "applied", "")
			}
			hostileOutcome(t, resp, "ok", "accepted", "applied", "")
			if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.fence WHERE mutation_id = 'bad'`); n != 0 {
				t.Fatalf("the rejected mutation left %d fences", n)
			}
			if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.row_version v JOIN synchro.synced_table s USING (table_id)
				WHERE s.name = 'docs' AND v.key IN ('d-ok', 'd-later')`); n != 2 {
				t.Fatalf("%d of the push's and the later write's docs rows are materialized, want 2", n)
			}
		})
	}
}

// TestSyncPushGuardsRulesThatReadIt: a pushed row of a table that other
// tables' rules read (sql, path and members rules), which its own scope rule
// and the default write policy accept, but which would make the rule of a
// synced row pointing at it fail or give that row a scope id too long.
func TestSyncPushGuardsRulesThatReadIt(t *testing.T) {
	t.Parallel()
	long := hostileNoise(3000)
	runCaptureGuard(t, []captureGuardCase{
		{name: "sql rule casts the pushed value", table: "reports", value: "high",
			bad: mut("bad", "grants", "update", map[string]any{"id": "g1"}, map[string]any{"level": "high"})},
		{name: "sql rule scope from the pushed value", table: "reports", long: true, value: long[:40],
			bad: mut("bad", "grants", "update", map[string]any{"id": "g1"}, map[string]any{"label": long})},
		{name: "impacted key of an integer-keyed table", table: "sheets", value: "one",
			bad: mut("bad", "grants", "update", map[string]any{"id": "g1"}, map[string]any{"sheet_id": "one"})},
		{name: "path rule template over the pushed row", table: "cards", long: true, value: long[:40],
			bad: mut("bad", "boards", "update", map[string]any{"id": "b1"}, map[string]any{"team": long})},
		{name: "members rule template over the pushed row", table: "rooms", long: true, value: long[:40],
			bad: mut("bad", "room_members", "insert", map[string]any{"id": "m1"},
				map[string]any{"room_id": "room1", "owner_id": "u1", "tag": long})},
		{name: "sql rule of the pushed row reads a row pushed before it", table: "reports", value: "high",
			before: []map[string]any{mut("grant", "grants", "insert", map[string]any{"id": "g2"},
				map[string]any{"owner_id": "u1", "report_id": "r9", "level": "high"})},
			bad: mut("bad", "reports", "insert", map[string]any{"id": "r9"}, map[string]any{"owner_id": "u1"})},
	})
}

// TestSyncPushGuardsPermissivePolicy: with a custom write policy that allows
// every write, pushes of rows whose path values (own or of the rows a rule
// reads) give scope ids too long, or whose values fail a rule.
func TestSyncPushGuardsPermissivePolicy(t *testing.T) {
	t.Parallel()
	long := hostileNoise(3000)
	runCaptureGuard(t, []captureGuardCase{
		{name: "own path to a pushed board", policy: true, table: "cards", long: true, value: long[:40],
			before: []map[string]any{mut("board", "boards", "insert", map[string]any{"id": "b3"},
				map[string]any{"owner_id": "u2", "team": long})},
			bad: mut("bad", "cards", "insert", map[string]any{"id": "c3"}, map[string]any{"board_id": "b3"})},
		{name: "another user's board read by a path rule", policy: true, table: "cards", long: true, value: long[:40],
			bad: mut("bad", "boards", "update", map[string]any{"id": "b2"}, map[string]any{"team": long})},
		{name: "path rule reads a board whose card the push wrote", policy: true, table: "cards", long: true, value: long[:40],
			before: []map[string]any{
				mut("board", "boards", "insert", map[string]any{"id": "b3"}, map[string]any{"owner_id": "u1", "team": "green"}),
				mut("card", "cards", "insert", map[string]any{"id": "c3"}, map[string]any{"board_id": "b3"})},
			bad: mut("bad", "boards", "update", map[string]any{"id": "b3"}, map[string]any{"team": long})},
		{name: "another user's grant read by an sql rule", policy: true, table: "reports", value: "high",
			before: []map[string]any{mut("grant", "grants", "update", map[string]any{"id": "g1"}, map[string]any{"owner_id": "u3"})},
			bad:    mut("bad", "grants", "update", map[string]any{"id": "g1"}, map[string]any{"level": "high"})},
		{name: "report moved by its own sql rule", policy: true, table: "reports", value: "high",
			before: []map[string]any{mut("grant", "grants", "insert", map[string]any{"id": "g2"},
				map[string]any{"owner_id": "u2", "report_id": "r2", "level": "high"})},
			bad: mut("bad", "reports", "insert", map[string]any{"id": "r2"}, map[string]any{"owner_id": "u2"})},
	})
}

// TestSyncPushGuardAcceptsValidChanges: the pushes of TestSyncPushGuardsRulesThatReadIt
// with values the rules take are applied, and materialization moves the rows the
// rules read them for. Most of them give rows u1 may not write (u2's report and
// sheet, team cards, the room) a scope, which the default write policy refuses
// (TestSyncPushJoinForeignRow): the permissive policy allows them.
func TestSyncPushGuardAcceptsValidChanges(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, captureGuardSetup+permissivePolicies)
	waitCaptureReady(t, e.d)
	e.connect(t, "u1", "c1")
	resp := e.push(t, "u1", "c1",
		mut("level", "grants", "update", map[string]any{"id": "g1"}, map[string]any{"level": "2", "label": "x"}),
		mut("sheet", "grants", "insert", map[string]any{"id": "g3"}, map[string]any{"owner_id": "u1", "sheet_id": "1"}),
		mut("team", "boards", "update", map[string]any{"id": "b1"}, map[string]any{"team": "green"}),
		mut("member", "room_members", "insert", map[string]any{"id": "m1"},
			map[string]any{"room_id": "room1", "owner_id": "u1", "tag": "blue"}),
		mut("grant", "grants", "insert", map[string]any{"id": "g2"}, map[string]any{"owner_id": "u1", "report_id": "r9", "level": "3"}),
		mut("report", "reports", "insert", map[string]any{"id": "r9"}, map[string]any{"owner_id": "u1"}))
	for _, id := range []string{"level", "sheet", "team", "member", "grant", "report"} {
		hostileOutcome(t, resp, id, "accepted", "applied", "")
	}
	waitMaterialized(t, e.d)
	got := rowsOf(t, e.d, `SELECT s.name || ' ' || m.key || ' ' || m.scope FROM synchro.membership m
		JOIN synchro.synced_table s USING (table_id)
		WHERE m.to_lsn IS NULL AND s.name IN ('reports', 'sheets', 'cards', 'rooms') ORDER BY 1`)
	want := []string{"cards c1 team:green", "cards c2 team:blue", "reports r1 label:x", "reports r1 level:2", "reports r1 user:u2",
		"reports r9 level:3", "reports r9 user:u1", "rooms room1 tag:blue", "sheets 1 grant:g1", "sheets 1 grant:g3", "sheets 1 user:u2"}
	if mustMarshal(t, got) != mustMarshal(t, want) {
		t.Fatalf("open memberships\n got %v\nwant %v", got, want)
	}
}
