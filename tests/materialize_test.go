package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/metrics"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestMaterializeMultiRowTransaction: one source transaction interleaving rows of
// two synced tables, one row changed several times, one inserted and deleted,
// rows moving between scopes. It is one replay unit with one ledger row, every
// event in the event ledger with its fence, and net effects: one per scope and
// row, at the ordinal of the row's last event, carrying the version of its last
// fence.
func TestMaterializeMultiRowTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id text PRIMARY KEY, title text, owner text);
		CREATE TABLE app.notes (id int PRIMARY KEY, body text, owner text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner}"}');
		SELECT synchro.register_table('app.notes', '{"kind":"column","template":"user:{owner}"}')`)
	docs, notes := tableID(t, d, "docs"), tableID(t, d, "notes")
	startStreaming(t, d, workerConfig(d, "w1"))
	commitTxn(t, d, `INSERT INTO app.docs VALUES ('d2', 'two', 'u1'); INSERT INTO app.notes VALUES (1, 'one', 'u1')`)
	waitMaterialized(t, d)

	c := commitTxn(t, d, `
		INSERT INTO app.docs VALUES ('d1', 'a', 'u1');                   -- 0
		INSERT INTO app.notes VALUES (10, 'x', 'u1');                    -- 1
		UPDATE app.docs SET title = 'b' WHERE id = 'd1';                 -- 2
		UPDATE app.docs SET title = 'x' WHERE id = 'd2';                 -- 3
		INSERT INTO app.notes VALUES (2, 'y', 'u2');                     -- 4
		UPDATE app.docs SET title = 'c', owner = 'u2' WHERE id = 'd1';   -- 5
		DELETE FROM app.notes WHERE id = 10;                             -- 6
		UPDATE app.docs SET owner = 'u3' WHERE id = 'd2';                -- 7
		UPDATE app.notes SET body = 'z' WHERE id = 1;                    -- 8
		UPDATE app.docs SET title = 'd' WHERE id = 'd1';                 -- 9`)
	waitMaterialized(t, d)
	commitLSN, _, events, applied := ledgerOf(t, d, c)
	if events != 10 || applied != 10 {
		t.Fatalf("txn_ledger: event_count %d, applied_count %d; want 10 and 10", events, applied)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, c.xid); n != 1 {
		t.Fatalf("%d ledger rows for one source transaction", n)
	}

	// Event ledger: ordinals 0..9 in source order, each with the fence of that
	// row operation (here the k-th event is the k-th registered DML).
	if len(c.fences) != 10 {
		t.Fatalf("the transaction made %d fences, want 10", len(c.fences))
	}
	got := rowsOf(t, d, `SELECT event_ordinal, fence_id::text, op, key, version FROM synchro.event_ledger
		WHERE commit_lsn = $1::pg_lsn ORDER BY event_ordinal`, commitLSN)
	want := rowsOf(t, d, `SELECT (f.dml_ordinal - 1), f.fence_id::text, f.op, f.key, f.version
		FROM synchro.fence f WHERE f.fence_id = ANY ($1::uuid[]) ORDER BY f.dml_ordinal`, c.fences)
	if !slices.Equal(got, want) {
		t.Fatalf("event ledger\n got %v\nwant %v", got, want)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f JOIN synchro.event_ledger e ON e.fence_id = f.fence_id WHERE f.fence_id = ANY ($1::uuid[]) AND e.commit_lsn = $2::pg_lsn`,
		c.fences, commitLSN); n != 10 {
		t.Fatalf("%d of 10 fences marked materialized at %s", n, commitLSN)
	}

	// The version of a row is the version of its last fence in the transaction.
	lastFence := func(key string) string {
		v := queryText(t, d, `SELECT version FROM synchro.fence WHERE fence_id = ANY ($1::uuid[]) AND key = $2
			ORDER BY dml_ordinal DESC LIMIT 1`, c.fences, key)
		return v
	}
	vD1, vD2, vN1, vN2 := lastFence("d1"), lastFence("d2"), lastFence("1"), lastFence("2")
	for _, rk := range [][3]string{{"app.docs", "d1", vD1}, {"app.docs", "d2", vD2}, {"app.notes", "1", vN1}, {"app.notes", "2", vN2}} {
		if head := rowVersion(t, d, rk[0], rk[1]); head != rk[2] {
			t.Fatalf("%s %s: row_head version %s, last fence version %s", rk[0], rk[1], head, rk[2])
		}
	}
	requireEffects(t, "effects of the transaction", effects(t, d, commitLSN), []effect{
		{scope: "user:u1", event: 7, ordNum: 0, tableID: docs, key: "d2", op: "delete"},
		{scope: "user:u1", event: 8, ordNum: 0, tableID: notes, key: "1", op: "upsert", version: vN1},
		{scope: "user:u2", event: 4, ordNum: 0, tableID: notes, key: "2", op: "upsert", version: vN2},
		{scope: "user:u2", event: 9, ordNum: 0, tableID: docs, key: "d1", op: "upsert", version: vD1},
		{scope: "user:u3", event: 7, ordNum: 0, tableID: docs, key: "d2", op: "upsert", version: vD2},
	})

	// Projection, current versions and the immutable row versions.
	gotRows := rowsOf(t, d, `SELECT table_id, key, version FROM synchro.synced_row ORDER BY table_id, key`)
	wantRows := []string{
		fmt.Sprintf("%d|d1|%s", docs, vD1), fmt.Sprintf("%d|d2|%s", docs, vD2),
		fmt.Sprintf("%d|1|%s", notes, vN1), fmt.Sprintf("%d|2|%s", notes, vN2),
	}
	if !slices.Equal(gotRows, wantRows) {
		t.Fatalf("synced_row\n got %v\nwant %v", gotRows, wantRows)
	}
	if got := rowsOf(t, d, `SELECT event_ordinal, image::text FROM synchro.row_version WHERE version = $1 AND commit_lsn = $2::pg_lsn`,
		vD1, commitLSN); !slices.Equal(got, []string{`9|{"id": "d1", "owner": "u2", "title": "d"}`}) {
		t.Fatalf("row_version of d1: %v", got)
	}
	// The intermediate versions of d1 are not pull-visible row versions.
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.row_version v JOIN synchro.fence f ON f.version = v.version
		WHERE f.fence_id = ANY ($1::uuid[]) AND f.key = 'd1'`, c.fences); n != 1 {
		t.Fatalf("d1 has %d row versions from this transaction, want only the last", n)
	}
	if got := queryText(t, d, `SELECT image::text FROM synchro.projection p JOIN synchro.synced_table s USING (relation_id)
		WHERE s.name = 'docs' AND p.key = 'd1'`); got != `{"id": "d1", "owner": "u2", "title": "d"}` {
		t.Fatalf("projection of d1: %s", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.projection p JOIN synchro.synced_table s USING (relation_id)
		WHERE s.name = 'notes' AND p.key = '10'`); n != 0 {
		t.Fatalf("note 10, inserted and deleted in one transaction, is projected")
	}
	if got := rowsOf(t, d, `SELECT scope, table_id, key FROM synchro.membership WHERE to_lsn IS NULL ORDER BY 1, 2, 3`); !slices.Equal(got, []string{
		fmt.Sprintf("user:u1|%d|1", notes), fmt.Sprintf("user:u2|%d|d1", docs), fmt.Sprintf("user:u2|%d|2", notes), fmt.Sprintf("user:u3|%d|d2", docs),
	}) {
		t.Fatalf("open membership: %v", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope = 'user:u1' AND key = 'd2' AND to_lsn = $1::pg_lsn`, commitLSN); n != 1 {
		t.Fatalf("the user:u1 edge of d2 is not closed at the commit")
	}
	requireEffectVersions(t, d)
	requireDigests(t, d)
}

// TestMaterializeDependencyChangeMovesRows: a write to a capture dependency moves
// every synced row reached through it to another scope, as net delete and upsert
// effects at that one event with effect ordinals in typed key order.
func TestMaterializeDependencyChangeMovesRows(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.owners (id text PRIMARY KEY, user_id text);
		CREATE TABLE app.projects (id bigint PRIMARY KEY, owner_id text REFERENCES app.owners);
		CREATE TABLE app.tasks (id int PRIMARY KEY, project_id bigint REFERENCES app.projects, title text);
		SELECT synchro.register_table('app.tasks', '{"kind":"path","path":["project_id","owner_id"],"template":"user:{user_id}"}');
		-- A second synced table reached through owners, with text keys.
		CREATE TABLE app.notes (id text PRIMARY KEY, owner_id text REFERENCES app.owners, body text);
		SELECT synchro.register_table('app.notes', '{"kind":"path","path":["owner_id"],"template":"user:{user_id}"}')`)
	tasks, notes := tableID(t, d, "tasks"), tableID(t, d, "notes")
	if tasks >= notes {
		t.Fatalf("table ids: tasks %d, notes %d", tasks, notes)
	}
	// Text keys in byte order: N1 < n1 < n10 < n2.
	noteKeys := []string{"N1", "n1", "n10", "n2"}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.relation WHERE registration_kind = 'capture_dependency'
		AND relation_oid IN ('app.projects'::regclass, 'app.owners'::regclass)`); n != 2 {
		t.Fatalf("projects and owners are not capture dependencies")
	}
	startStreaming(t, d, workerConfig(d, "w1"))
	commitTxn(t, d, `INSERT INTO app.owners VALUES ('o1', 'u1'), ('o2', 'u9');
		INSERT INTO app.projects VALUES (1, 'o1'), (2, 'o2');
		INSERT INTO app.tasks SELECT i, 1, 'task ' || i FROM generate_series(1, 25) i;
		INSERT INTO app.tasks SELECT i, 2, 'other ' || i FROM generate_series(101, 103) i;
		INSERT INTO app.notes VALUES ('n2', 'o1', 'x'), ('n10', 'o1', 'x'), ('n1', 'o1', 'x'), ('N1', 'o1', 'x')`)
	waitMaterialized(t, d)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope = 'user:u1' AND to_lsn IS NULL`); n != 29 {
		t.Fatalf("user:u1 has %d rows, want 29", n)
	}
	versions := map[string]string{}
	for _, r := range rowsOf(t, d, `SELECT key, version FROM synchro.synced_row`) {
		k, v, _ := strings.Cut(r, "|")
		versions[k] = v
	}

	c := commitTxn(t, d, `UPDATE app.owners SET user_id = 'u2' WHERE id = 'o1'`)
	waitMaterialized(t, d)
	commitLSN, _, events, applied := ledgerOf(t, d, c)
	if events != 1 || applied != 1 {
		t.Fatalf("txn_ledger: event_count %d, applied_count %d; want 1 and 1", events, applied)
	}
	// Effect ordinals in (table_id, typed key) order: tasks before notes, int
	// keys numerically (2 before 10), text keys bytewise.
	var want []effect
	for _, sc := range []struct{ scope, op string }{{"user:u1", "delete"}, {"user:u2", "upsert"}} {
		ord := 0
		add := func(table int, k string) {
			e := effect{scope: sc.scope, event: 0, ordNum: ord, tableID: table, key: k, op: sc.op}
			if sc.op == "upsert" {
				e.version = versions[k]
			}
			want = append(want, e)
			ord++
		}
		for i := 1; i <= 25; i++ {
			add(tasks, strconv.Itoa(i))
		}
		for _, k := range noteKeys {
			add(notes, k)
		}
	}
	requireEffects(t, "effects of the owner change", effects(t, d, commitLSN), want)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope = 'user:u1' AND to_lsn = $1::pg_lsn`, commitLSN); n != 29 {
		t.Fatalf("%d user:u1 edges closed at the commit, want 29", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope = 'user:u1' AND to_lsn IS NULL`); n != 0 {
		t.Fatalf("%d user:u1 edges still open", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope = 'user:u2' AND from_lsn = $1::pg_lsn AND to_lsn IS NULL`, commitLSN); n != 29 {
		t.Fatalf("%d user:u2 edges opened at the commit, want 29", n)
	}
	if got := rowsOf(t, d, `SELECT scope, digest, row_count FROM synchro.scope_digest WHERE commit_lsn = $1::pg_lsn ORDER BY scope`, commitLSN); len(got) != 2 ||
		got[0] != "user:u1|0|0" {
		t.Fatalf("scope digests at the commit: %v", got)
	}
	requireDigests(t, d)

	// One transaction changes a task (event 0) and moves its project (event 1):
	// every moved task's effects are at event 1, the last event impacting it,
	// and the changed task carries its new version. The notes stay.
	c2 := commitTxn(t, d, `UPDATE app.tasks SET title = 'seven' WHERE id = 7;
		UPDATE app.projects SET owner_id = 'o2' WHERE id = 1`)
	waitMaterialized(t, d)
	commit2, _, _, _ := ledgerOf(t, d, c2)
	v7 := rowVersion(t, d, "app.tasks", "7")
	if v7 == versions["7"] {
		t.Fatalf("task 7 kept its version after an update")
	}
	want = want[:0]
	for i := 1; i <= 25; i++ {
		want = append(want, effect{scope: "user:u2", event: 1, ordNum: i - 1, tableID: tasks, key: strconv.Itoa(i), op: "delete"})
	}
	for i := 1; i <= 25; i++ {
		k := strconv.Itoa(i)
		v := versions[k]
		if i == 7 {
			v = v7
		}
		want = append(want, effect{scope: "user:u9", event: 1, ordNum: i - 1, tableID: tasks, key: k, op: "upsert", version: v})
	}
	requireEffects(t, "effects of the project move", effects(t, d, commit2), want)
	requireEffectVersions(t, d)
	requireDigests(t, d)
}

// TestMaterializeMembersRule: membership rows of a members rule make a synced
// row join and leave the scopes of their users.
func TestMaterializeMembersRule(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id int PRIMARY KEY, title text);
		CREATE TABLE app.doc_members (id bigint PRIMARY KEY, doc_id int REFERENCES app.docs, user_id text);
		SELECT synchro.register_table('app.docs', '{"kind":"members","relation":"app.doc_members","template":"user:{user_id}"}')`)
	docs := tableID(t, d, "docs")
	startStreaming(t, d, workerConfig(d, "w1"))

	step := docsStep(t, d, docs)
	step(`INSERT INTO app.docs VALUES (1, 'a'), (2, 'b')`) // in no scope yet
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.synced_row`); n != 2 {
		t.Fatalf("%d synced rows, want 2", n)
	}
	step(`INSERT INTO app.doc_members VALUES (1, 1, 'u1')`,
		effect{scope: "user:u1", event: 0, key: "1", op: "upsert"})
	step(`INSERT INTO app.doc_members VALUES (2, 1, 'u2'), (3, 2, 'u2')`,
		effect{scope: "user:u2", event: 0, key: "1", op: "upsert"},
		effect{scope: "user:u2", event: 1, key: "2", op: "upsert"})
	step(`DELETE FROM app.doc_members WHERE id = 1`,
		effect{scope: "user:u1", event: 0, key: "1", op: "delete"})
	step(`UPDATE app.doc_members SET user_id = 'u3' WHERE id = 3`,
		effect{scope: "user:u2", event: 0, key: "2", op: "delete"},
		effect{scope: "user:u3", event: 0, key: "2", op: "upsert"})
	step(`UPDATE app.docs SET title = 'a2' WHERE id = 1`,
		effect{scope: "user:u2", event: 0, key: "1", op: "upsert"})
	step(`DELETE FROM app.doc_members WHERE id = 2; DELETE FROM app.docs WHERE id = 1`,
		effect{scope: "user:u2", event: 1, key: "1", op: "delete"})
	if got := rowsOf(t, d, `SELECT scope, key FROM synchro.membership WHERE to_lsn IS NULL`); !slices.Equal(got, []string{"user:u3|2"}) {
		t.Fatalf("open membership %v, want only user:u3|2", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.synced_row WHERE key = '1'`); n != 0 {
		t.Fatalf("deleted doc 1 still has a current version")
	}
	requireEffectVersions(t, d)
	requireDigests(t, d)
}

// TestMaterializeTransactionWithoutApplicableEvents: a decoded source transaction
// with no applicable event still gets its completed ledger row, and the
// high-watermark moves to its transaction end.
func TestMaterializeTransactionWithoutApplicableEvents(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id int PRIMARY KEY, v text);
		SELECT synchro.register_table('app.docs', '{"kind":"shared","scope":"all"}');
		-- Not registered, but published (by hand): its rows are decoded and not applicable.
		CREATE TABLE app.plain (id int PRIMARY KEY, v text);
		ALTER PUBLICATION synchro ADD TABLE app.plain;
		-- Neither registered nor published: pgoutput sends nothing for it.
		CREATE TABLE app.hidden (id int PRIMARY KEY)`)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'x')`)
	waitMaterialized(t, d)
	effectsBefore := queryInt(t, d, `SELECT count(*) FROM synchro.effect`)

	requireTransactionEnd := func(c committed, wantEvents int) {
		t.Helper()
		waitFor(t, "ledger row", 30*time.Second, func() (bool, error) {
			var ok bool
			err := d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM synchro.txn_ledger WHERE xid = $1)`, c.xid).Scan(&ok)
			return ok, err
		})
		commitLSN, endLSN, events, applied := ledgerOf(t, d, c)
		if events != wantEvents || applied != 0 {
			t.Fatalf("txn_ledger: event_count %d, applied_count %d; want %d and 0", events, applied, wantEvents)
		}
		if n := queryInt(t, d, `SELECT count(*) FROM synchro.event_ledger WHERE commit_lsn = $1::pg_lsn`, commitLSN); n != 0 {
			t.Fatalf("%d event ledger rows for a transaction without applicable events", n)
		}
		waitFor(t, "high-watermark", 30*time.Second, func() (bool, error) {
			var ok bool
			err := d.Pool.QueryRow(context.Background(), `SELECT materialized_commit_lsn >= $1::pg_lsn FROM synchro.progress`, commitLSN).Scan(&ok)
			return ok, err
		})
		// Nothing was written after it, so it is the high-watermark itself.
		var mc, me string
		var ok bool
		if err := d.Pool.QueryRow(context.Background(), `SELECT materialized_commit_lsn::text, materialized_end_lsn::text,
			processed_end_lsn >= materialized_end_lsn FROM synchro.progress`).Scan(&mc, &me, &ok); err != nil {
			t.Fatal(err)
		}
		if mc != commitLSN || me != endLSN || !ok {
			t.Fatalf("progress at %s..%s (processed after it: %v), want the transaction end %s..%s", mc, me, ok, commitLSN, endLSN)
		}
	}
	requireTransactionEnd(commitTxn(t, d, `INSERT INTO app.plain VALUES (1, 'p')`), 1)
	requireTransactionEnd(commitTxn(t, d, `SELECT pg_logical_emit_message(true, 'acme.other', 'not synchro')`), 0)

	// A write pgoutput does not send is no decoded transaction: the idle
	// acknowledgement passes it without a ledger row. What it acknowledges is
	// exactly a WAL flush position the worker read before it asked for the
	// keepalive (logged before it is recorded), one at or past the flush
	// position the test read before waiting: processed boundary, acknowledgement
	// and slot all at it, not at the keepalive's WAL end.
	hidden := commitTxn(t, d, `INSERT INTO app.hidden VALUES (1)`)
	flushed := queryText(t, d, `SELECT pg_current_wal_flush_lsn()::text`)
	var ack string
	waitFor(t, "an idle acknowledgement at a flush position the worker read", 30*time.Second, func() (bool, error) {
		var at bool
		err := d.Pool.QueryRow(context.Background(), `SELECT p.acknowledged_end_lsn::text,
				p.acknowledged_end_lsn >= $1::pg_lsn AND p.processed_end_lsn = p.acknowledged_end_lsn AND s.confirmed_flush_lsn = p.acknowledged_end_lsn
			FROM synchro.progress p JOIN pg_replication_slots s ON s.slot_name = p.slot_name`, flushed).Scan(&ack, &at)
		return at && strings.Contains(log.String(), `msg="idle acknowledgement" worker=w1 target=`+ack+"\n"), err
	})
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, hidden.xid); n != 0 {
		t.Fatalf("an undecoded transaction has a ledger row")
	}
	if !queryBool(t, d, `SELECT $1::pg_lsn >= $2::pg_lsn`, ack, hidden.after) {
		t.Fatalf("the acknowledgement %s did not pass the unpublished write (%s)", ack, hidden.after)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.effect`); n != effectsBefore {
		t.Fatalf("transactions without applicable events produced effects")
	}
}

// determinismSetup and determinismWorkload exercise path, column and members
// rules, dependency moves, deletes and a message-only transaction.
const determinismSetup = `CREATE SCHEMA app;
	CREATE TABLE app.owners (id text PRIMARY KEY, user_id text);
	CREATE TABLE app.projects (id bigint PRIMARY KEY, owner_id text REFERENCES app.owners);
	CREATE TABLE app.tasks (id int PRIMARY KEY, project_id bigint REFERENCES app.projects, title text);
	CREATE TABLE app.docs (id text PRIMARY KEY, title text, owner text);
	CREATE TABLE app.folders (id int PRIMARY KEY, name text);
	CREATE TABLE app.folder_members (id bigint PRIMARY KEY, folder_id int REFERENCES app.folders, user_id text);
	SELECT synchro.register_table('app.tasks', '{"kind":"path","path":["project_id","owner_id"],"template":"user:{user_id}"}');
	SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner}"}');
	SELECT synchro.register_table('app.folders', '{"kind":"members","relation":"app.folder_members","template":"user:{user_id}"}')`

var determinismWorkload = []string{
	`INSERT INTO app.owners VALUES ('o1', 'u1'), ('o2', 'u2'); INSERT INTO app.projects VALUES (1, 'o1'), (2, 'o2')`,
	`INSERT INTO app.tasks SELECT i, 1 + i % 2, 'task ' || i FROM generate_series(1, 12) i`,
	`INSERT INTO app.docs SELECT 'd' || i, 'doc', 'u' || (1 + i % 2) FROM generate_series(1, 5) i;
	 INSERT INTO app.folders VALUES (1, 'f1'), (2, 'f2');
	 INSERT INTO app.folder_members VALUES (1, 1, 'u1'), (2, 2, 'u2'), (3, 1, 'u2')`,
	`UPDATE app.owners SET user_id = 'u3' WHERE id = 'o1'; UPDATE app.tasks SET title = 'changed' WHERE id IN (3, 4)`,
	`UPDATE app.tasks SET project_id = 2 WHERE id IN (1, 5, 9); DELETE FROM app.tasks WHERE id = 12`,
	`UPDATE app.docs SET owner = 'u3' WHERE id IN ('d1', 'd2'); DELETE FROM app.docs WHERE id = 'd5';
	 INSERT INTO app.docs VALUES ('d10', 'x', 'u1'), ('d9', 'y', 'u1')`,
	`DELETE FROM app.folder_members WHERE id = 3; UPDATE app.folder_members SET user_id = 'u4' WHERE id = 2;
	 UPDATE app.folders SET name = 'z' WHERE id = 2`,
	`SELECT pg_logical_emit_message(true, 'acme.other', 'no event')`,
	`UPDATE app.projects SET owner_id = 'o1' WHERE id = 2; INSERT INTO app.tasks VALUES (20, 2, 't20'), (13, 1, 't13')`,
	`UPDATE app.tasks SET title = 'again' WHERE id = 20; UPDATE app.owners SET user_id = 'u1' WHERE id = 'o1';
	 UPDATE app.tasks SET title = 'last' WHERE id = 20; DELETE FROM app.tasks WHERE id = 13`,
	// Consecutive transactions on synced tables only (no relation a rule reads):
	// one row moves between scopes, is deleted and re-inserted across them.
	`UPDATE app.docs SET owner = 'u5' WHERE id = 'd3'`,
	`UPDATE app.docs SET owner = 'u3' WHERE id = 'd3'; UPDATE app.docs SET title = 't' WHERE id = 'd4'`,
	`DELETE FROM app.docs WHERE id = 'd3'`,
	`INSERT INTO app.docs VALUES ('d3', 'again', 'u5')`,
	`UPDATE app.docs SET owner = 'u5' WHERE id = 'd4'; DELETE FROM app.docs WHERE id = 'd4'`,
	`INSERT INTO app.docs VALUES ('d4', 'back', 'u1'); UPDATE app.docs SET owner = 'u2' WHERE id = 'd4'`,
	`UPDATE app.docs SET title = 'same scope' WHERE id = 'd4'; UPDATE app.tasks SET title = 'z' WHERE id = 2`,
	`DELETE FROM app.docs WHERE id = 'd1'`,
	`INSERT INTO app.docs VALUES ('d1', 'reborn', 'u3')`,
}

// materializedState renders everything materialization derived, with commit
// positions replaced by the transaction's index in commit order and opaque
// versions left out, so that two databases can be compared.
func materializedState(t *testing.T, d *testdb.DB) map[string][]string {
	t.Helper()
	idx := `(SELECT count(*) FROM synchro.txn_ledger l2 WHERE l2.commit_lsn < %s)`
	at := func(col string) string { return fmt.Sprintf(idx, col) }
	return map[string][]string{
		"txn_ledger": rowsOf(t, d, `SELECT `+at("l.commit_lsn")+`, event_count, applied_count FROM synchro.txn_ledger l ORDER BY commit_lsn`),
		"event_ledger": rowsOf(t, d, `SELECT `+at("e.commit_lsn")+`, event_ordinal, relation_id, op, key
			FROM synchro.event_ledger e ORDER BY commit_lsn, event_ordinal`),
		"effect": rowsOf(t, d, `SELECT `+at("e.commit_lsn")+`, scope, event_ordinal, effect_ordinal, table_id, key, op
			FROM synchro.effect e ORDER BY commit_lsn, scope COLLATE "C", event_ordinal, effect_ordinal`),
		"membership": rowsOf(t, d, `SELECT scope, table_id, key, `+at("m.from_lsn")+`, CASE WHEN to_lsn IS NULL THEN -1 ELSE `+at("m.to_lsn")+` END
			FROM synchro.membership m ORDER BY 1, 2, 3, 4`),
		"scope_digest": rowsOf(t, d, `SELECT `+at("s.commit_lsn")+`, scope, digest, row_count FROM synchro.scope_digest s ORDER BY 1, 2`),
		"row_version": rowsOf(t, d, `SELECT `+at("v.commit_lsn")+`, event_ordinal, table_id, key, checksum, coalesce(image::text, 'null')
			FROM synchro.row_version v ORDER BY 1, 2, 3, 4`),
		"synced_row": rowsOf(t, d, `SELECT table_id, key, checksum FROM synchro.synced_row ORDER BY 1, 2`),
		"projection": rowsOf(t, d, `SELECT relation_id, key, image::text FROM synchro.projection ORDER BY 1, 2`),
	}
}

func requireSameState(t *testing.T, what string, a, b map[string][]string) {
	t.Helper()
	for name, rowsA := range a {
		if !slices.Equal(rowsA, b[name]) {
			t.Fatalf("%s: %s differs\n A: %v\n B: %v", what, name, rowsA, b[name])
		}
	}
}

// TestMaterializationIsDeterministic: the same source transactions give the same
// ledgers, effects with the same positions, edges, digests and row versions,
// whether they are materialized one by one while written or in a single batch
// replayed after the fact.
func TestMaterializationIsDeterministic(t *testing.T) {
	t.Parallel()
	a := testdb.New(t)
	a.Exec(t, determinismSetup)
	startStreaming(t, a, workerConfig(a, "wa"))
	for _, sql := range determinismWorkload {
		commitTxn(t, a, sql)
		waitMaterialized(t, a)
	}

	b := testdb.New(t)
	b.Exec(t, determinismSetup)
	materializeInOneBatch(t, b, startStreaming(t, b, workerConfig(b, "wb")), determinismWorkload)

	if n := queryInt(t, a, `SELECT count(DISTINCT xmin::text) FROM synchro.txn_ledger`); n != int64(len(determinismWorkload)) {
		t.Fatalf("database A materialized in %d batches, want one per transaction", n)
	}
	sa, sb := materializedState(t, a), materializedState(t, b)
	if len(sa["txn_ledger"]) != len(determinismWorkload) || len(sa["effect"]) == 0 {
		t.Fatalf("workload materialized %d transactions and %d effects", len(sa["txn_ledger"]), len(sa["effect"]))
	}
	requireSameState(t, "one-by-one vs one batch", sa, sb)
	requireOpenEdgesOfLiveRows(t, a)
	requireEffectVersions(t, a)
	requireEffectVersions(t, b)
	requireDigests(t, a)
	requireDigests(t, b)
}

// requireOpenEdgesOfLiveRows: an independent oracle for determinismSetup's
// tables. Once everything is materialized, the open edges are the scope rules
// evaluated over the live tables.
func requireOpenEdgesOfLiveRows(t *testing.T, d *testdb.DB) {
	t.Helper()
	live := rowsOf(t, d, `
		SELECT 'user:' || o.user_id, s.table_id, t.id::text FROM app.tasks t
		JOIN app.projects p ON p.id = t.project_id JOIN app.owners o ON o.id = p.owner_id
		JOIN synchro.synced_table s ON s.name = 'tasks'
		UNION SELECT 'user:' || d.owner, s.table_id, d.id FROM app.docs d JOIN synchro.synced_table s ON s.name = 'docs'
		UNION SELECT 'user:' || m.user_id, s.table_id, f.id::text FROM app.folders f
		JOIN app.folder_members m ON m.folder_id = f.id JOIN synchro.synced_table s ON s.name = 'folders'
		ORDER BY 1, 2, 3`)
	if got := rowsOf(t, d, `SELECT scope, table_id, key FROM synchro.membership WHERE to_lsn IS NULL ORDER BY 1, 2, 3`); !slices.Equal(got, live) {
		t.Fatalf("open membership\n got %v\nwant %v (rules over live rows)", got, live)
	}
}

// dependencyWorkload is a long run of one-row transactions into relations
// that rules read (a path rule's parent and grandparent, a members relation),
// each a segment of its own, between runs of transactions into synced tables
// only (segments of several transactions), after a setup transaction.
func dependencyWorkload() []string {
	w := []string{`INSERT INTO app.owners SELECT 'o' || i, 'u' || i FROM generate_series(1, 4) i;
		INSERT INTO app.projects SELECT i, 'o' || (1 + i % 4) FROM generate_series(1, 6) i;
		INSERT INTO app.tasks SELECT i, 1 + i % 6, 'task ' || i FROM generate_series(1, 60) i;
		INSERT INTO app.docs SELECT 'd' || i, 'doc', 'u' || (1 + i % 3) FROM generate_series(1, 10) i;
		INSERT INTO app.folders SELECT i, 'f' || i FROM generate_series(1, 5) i;
		INSERT INTO app.folder_members SELECT i, 1 + i % 5, 'u' || (1 + i % 4) FROM generate_series(1, 10) i`}
	for i := 1; i <= 30; i++ {
		w = append(w,
			fmt.Sprintf(`UPDATE app.projects SET owner_id = 'o%d' WHERE id = %d`, 1+i%4, 1+i%6),
			fmt.Sprintf(`INSERT INTO app.folder_members VALUES (%d, %d, 'u%d')`, 100+i, 1+i%5, 1+i%7),
			fmt.Sprintf(`UPDATE app.tasks SET title = 'v%d' WHERE id = %d`, i, 1+i%60),
			fmt.Sprintf(`UPDATE app.docs SET owner = 'u%d' WHERE id = 'd%d'`, 1+i%5, 1+i%10),
			fmt.Sprintf(`UPDATE app.owners SET user_id = 'u%d' WHERE id = 'o%d'`, 1+i%6, 1+i%4),
			fmt.Sprintf(`DELETE FROM app.folder_members WHERE id = %d`, 100+i),
			fmt.Sprintf(`UPDATE app.tasks SET project_id = %d WHERE id = %d; UPDATE app.projects SET owner_id = 'o%d' WHERE id = %d`,
				1+i%6, 1+(7*i)%60, 1+(i+1)%4, 1+(i+2)%6),
			fmt.Sprintf(`UPDATE app.folder_members SET user_id = 'u%d' WHERE id = %d`, 1+i%3, 1+i%10),
		)
	}
	return w
}

// TestMaterializeDependencyChangesInLargeBatches: a backlog of transactions
// that change relations rules read, each a segment of its own among segments
// of several transactions, materializes exactly as it does a transaction at a
// time, whether it comes in batches of 7 or in one batch (whose segments leave
// thousands of rows in the scratch tables, so that they are emptied both by
// DELETE and by TRUNCATE within the batch).
func TestMaterializeDependencyChangesInLargeBatches(t *testing.T) {
	t.Parallel()
	workload := dependencyWorkload()
	state := func(maxTxns int, wantBatches func(n int64) bool) map[string][]string {
		d := testdb.New(t)
		d.Exec(t, determinismSetup)
		n := materializeInBatches(t, d, startStreaming(t, d, workerConfig(d, "wa")), workload, maxTxns)
		if !wantBatches(n) {
			t.Fatalf("%d transactions in batches of at most %d materialized in %d batches", len(workload), maxTxns, n)
		}
		requireOpenEdgesOfLiveRows(t, d)
		requireEffectVersions(t, d)
		requireDigests(t, d)
		return materializedState(t, d)
	}
	one := state(1, func(n int64) bool { return n == int64(len(workload)) })
	if len(one["txn_ledger"]) != len(workload) || len(one["effect"]) < len(workload) {
		t.Fatalf("workload materialized %d transactions and %d effects", len(one["txn_ledger"]), len(one["effect"]))
	}
	requireSameState(t, "a transaction at a time vs batches of 7", one,
		state(7, func(n int64) bool { return n >= int64(len(workload)/7) && n < int64(len(workload)) }))
	requireSameState(t, "a transaction at a time vs one batch", one, state(1000, func(n int64) bool { return n == 1 }))
}

// TestWorkerHeartbeat: the worker reports a fresh heartbeat in state streaming
// whose registry generation and materialized positions are never after durable
// progress, and a worker whose context ends reports the state stopped.
func TestWorkerHeartbeat(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	// Rows of processes gone before: one silent for two days is forgotten, one
	// silent for an hour stays listed.
	d.Exec(t, `INSERT INTO synchro.worker_heartbeat (worker_id, database_name, slot_name, state, heartbeat_at, started_at)
		VALUES ('gone-2d', current_database(), 'synchro', 'streaming', now() - interval '2 days', now() - interval '3 days'),
		       ('gone-1h', current_database(), 'synchro', 'streaming', now() - interval '1 hour', now() - interval '3 days')`)
	w := startStreaming(t, d, workerConfig(d, "hb-1"))
	waitState(t, d, "hb-1", "streaming")
	if got := queryText(t, d, `SELECT string_agg(worker_id, ' ' ORDER BY worker_id) FROM synchro.worker_heartbeat`); got != "gone-1h hb-1" {
		t.Fatalf("heartbeat rows %q, want gone-1h hb-1", got)
	}
	for i := 0; i < 5; i++ {
		commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs VALUES (%d, 'x')`, i))
	}
	waitMaterialized(t, d)
	// Sample the heartbeat against progress until it has caught up; every sample
	// must keep the ordering.
	waitFor(t, "heartbeat catching up with progress", 30*time.Second, func() (bool, error) {
		var fresh, ordered, caughtUp bool
		var state, db, slot string
		err := d.Pool.QueryRow(context.Background(), `
			SELECT h.state, h.database_name, h.slot_name,
			       h.heartbeat_at > now() - interval '5 seconds' AND h.started_at <= h.heartbeat_at,
			       coalesce(h.registry_generation <= p.registry_generation, h.registry_generation IS NULL)
			         AND coalesce(h.materialized_commit_lsn <= p.materialized_commit_lsn, h.materialized_commit_lsn IS NULL)
			         AND coalesce(h.materialized_end_lsn <= p.materialized_end_lsn, h.materialized_end_lsn IS NULL),
			       coalesce(h.materialized_commit_lsn = p.materialized_commit_lsn AND h.registry_generation = p.registry_generation, false)
			FROM synchro.worker_heartbeat h, synchro.progress p WHERE h.worker_id = 'hb-1'`).
			Scan(&state, &db, &slot, &fresh, &ordered, &caughtUp)
		if err != nil {
			return false, err
		}
		if state != "streaming" || db != d.Name || slot != workerConfig(d, "hb-1").Slot || !fresh || !ordered {
			return false, fmt.Errorf("heartbeat state %q db %q slot %q fresh %v ordered %v", state, db, slot, fresh, ordered)
		}
		return caughtUp, nil
	})

	// Stopped: the row says so as Run returns, not once its heartbeat is stale.
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := queryText(t, d, `SELECT h.state || ' ' || (h.materialized_commit_lsn = p.materialized_commit_lsn)
		FROM synchro.worker_heartbeat h, synchro.progress p WHERE h.worker_id = 'hb-1'`); got != "stopped true" {
		t.Fatalf("heartbeat of the stopped worker: state and position at progress %q, want \"stopped true\"", got)
	}
}

// TestMaterializePartialImages: pgoutput leaves unchanged out-of-line (TOAST)
// values out of an update. The projected image, the row version and its
// checksum must still hold them: after an update materialized on its own,
// after several such updates of a row in one transaction, and after several
// transactions changing a row that are materialized in one batch.
//
// The key guard (a PL/pgSQL BEFORE UPDATE trigger) returns NEW untouched, so
// the unchanged value keeps its place and pgoutput leaves it out (it used to
// rebuild the tuple, storing and logging the value again: issue 28).
func TestMaterializePartialImages(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	partialImageTable(t, d)
	big := tableID(t, d, "big")
	cfg := workerConfig(d, "w1")
	w := startStreaming(t, d, cfg)
	peek := d.CreateSlot(t)

	// Transactions materialized one by one.
	for _, sql := range []string{
		`INSERT INTO app.big VALUES (1, repeat('x', 10000), 'a'), (2, repeat('y', 10000), 'a')`,
		`UPDATE app.big SET v = 'b' WHERE id = 1`,
		`UPDATE app.big SET v = 'c' WHERE id = 1; UPDATE app.big SET v = 'd' WHERE id = 1;
		 UPDATE app.big SET v = 'b' WHERE id = 2; UPDATE app.big SET body = repeat('z', 10000) WHERE id = 2;
		 UPDATE app.big SET v = 'c' WHERE id = 2`,
	} {
		commitTxn(t, d, sql)
		waitMaterialized(t, d)
	}
	w.stop(t)
	batchFrom := queryText(t, d, `SELECT materialized_commit_lsn::text FROM synchro.progress`)

	// Transactions materialized in one batch.
	for _, sql := range []string{
		`INSERT INTO app.big VALUES (3, repeat('p', 10000), 'a'), (4, repeat('q', 10000), 'a')`,
		`UPDATE app.big SET v = 'b' WHERE id = 3`,
		`UPDATE app.big SET v = 'c' WHERE id = 3; UPDATE app.big SET v = 'd' WHERE id = 3`,
		`UPDATE app.big SET v = 'b' WHERE id = 4`,
		`UPDATE app.big SET v = 'c' WHERE id = 4`,
		`UPDATE app.big SET v = 'e' WHERE id = 1`,
		`UPDATE app.big SET v = 'f' WHERE id = 1`,
	} {
		commitTxn(t, d, sql)
	}
	cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 500*time.Millisecond, -1, 1000
	startWorker(t, d, cfg)
	waitMaterialized(t, d)
	if n := queryInt(t, d, `SELECT count(DISTINCT xmin::text) FROM synchro.txn_ledger WHERE commit_lsn > $1::pg_lsn`, batchFrom); n != 1 {
		t.Fatalf("the second group of transactions was materialized in %d batches, want 1", n)
	}

	// The updates really were partial: pgoutput marked body unchanged.
	unchanged := 0
	for _, txn := range d.Decode(t, peek) {
		for _, ev := range txn.Rows {
			if c, ok := ev.Value("body"); ok && c.Unchanged {
				unchanged++
			}
		}
	}
	if unchanged < 10 {
		t.Fatalf("pgoutput sent %d updates without the body, want at least 10", unchanged)
	}
	for _, r := range []struct{ key, body, v string }{
		{"1", "repeat('x', 10000)", "f"}, {"2", "repeat('z', 10000)", "c"},
		{"3", "repeat('p', 10000)", "d"}, {"4", "repeat('q', 10000)", "c"},
	} {
		if !queryBool(t, d, `SELECT p.image = jsonb_build_object('id', $1::text::int, 'body', `+r.body+`, 'v', $2::text)
			FROM synchro.projection p JOIN synchro.synced_table s USING (relation_id) WHERE s.name = 'big' AND p.key = $1::text`, r.key, r.v) {
			t.Fatalf("projection of row %s lost its unchanged TOAST value: %s", r.key,
				queryText(t, d, `SELECT left(p.image::text, 200) FROM synchro.projection p WHERE p.key = $1::text`, r.key))
		}
		if !queryBool(t, d, `SELECT v.image = jsonb_build_object('id', $1::text::int, 'body', `+r.body+`, 'v', $2::text)
			       AND s.checksum = synchro.row_checksum($3, $1::text, v.image) AND v.checksum = s.checksum
			FROM synchro.synced_row s JOIN synchro.row_version v USING (version) WHERE s.table_id = $3 AND s.key = $1::text`, r.key, r.v, big) {
			t.Fatalf("current row version of row %s lost its unchanged TOAST value", r.key)
		}
	}
	requireBodiesKept(t, d)
}

// partialImageTable registers app.big (id, body, v) with its body stored out of
// line and uncompressed and the key guard disabled, so that pgoutput leaves an
// unchanged body out of an update's image (a partial image).
func partialImageTable(t *testing.T, d *testdb.DB) {
	t.Helper()
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.big (id int PRIMARY KEY, body text, v text);
		ALTER TABLE app.big ALTER COLUMN body SET STORAGE EXTERNAL;
		SELECT synchro.register_table('app.big', '{"kind":"shared","scope":"all"}')`)
}

// TestMaterializeUpdateWithOutOfLineKey: a long key (within
// synchro.max_key_bytes) can itself be stored out of line. With the key guard
// disabled (which rebuilt the new tuple), pgoutput then sends an update of
// another column with the key unchanged in the new tuple and the whole key in
// the old one (PostgreSQL logs the replica identity of an update in full when
// it has out-of-line values). That is no relation drift: the update must be
// paired by the old tuple's key and materialized, not quarantined for good.
func TestMaterializeUpdateWithOutOfLineKey(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.long (id text PRIMARY KEY, a text, b text, v text);
		SELECT synchro.register_table('app.long', '{"kind":"shared","scope":"all"}');
		ALTER TABLE app.long DISABLE TRIGGER synchro_key_guard`)
	startStreaming(t, d, workerConfig(d, "w1"))
	peek := d.CreateSlot(t)
	// Hex digits do not compress: the 992-byte key, the widest value, goes out of line.
	d.Exec(t, `INSERT INTO app.long SELECT
		(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 31) g),
		(SELECT string_agg(md5((-g)::text), '') FROM generate_series(1, 28) g),
		(SELECT string_agg(md5((100 + g)::text), '') FROM generate_series(1, 28) g), 'v0'`)
	waitMaterialized(t, d)
	d.Exec(t, `UPDATE app.long SET v = 'v1'`)
	waitMaterialized(t, d)

	unchanged := 0
	for _, txn := range d.Decode(t, peek) {
		for _, ev := range txn.Rows {
			if c, ok := ev.Value("id"); ok && c.Unchanged && ev.Op == "update" {
				unchanged++
			}
		}
	}
	if unchanged != 1 {
		t.Fatalf("premise: pgoutput sent %d updates with the key unchanged in the new tuple, want 1", unchanged)
	}
	if !queryBool(t, d, `SELECT p.key = l.id AND p.image = to_jsonb(l) FROM synchro.projection p, app.long l`) {
		t.Fatalf("projection differs from the row: %s", queryText(t, d, `SELECT left(image::text, 120) FROM synchro.projection`))
	}
	if got := rowsOf(t, d, `SELECT op FROM synchro.event_ledger ORDER BY commit_lsn`); !slices.Equal(got, []string{"insert", "update"}) {
		t.Fatalf("event ledger %v, want the insert and the update", got)
	}
	requireEffectVersions(t, d)
	requireDigests(t, d)
}

// requireBodiesKept: every row version ever recorded of app.big holds the body
// (partial images were completed), effects carry their versions and digests agree.
func requireBodiesKept(t *testing.T, d *testdb.DB) {
	t.Helper()
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.row_version WHERE table_id = $1 AND image IS NOT NULL AND NOT image ? 'body'`,
		tableID(t, d, "big")); n != 0 {
		t.Fatalf("%d row versions lack the unchanged TOAST value", n)
	}
	requireEffectVersions(t, d)
	requireDigests(t, d)
}

// TestMaterializeSpilledTransaction: a transaction whose row data passes the
// worker's spill threshold keeps its later events' values and images in a
// temporary file and is materialized the same: partial images (unchanged TOAST
// values left out) complete over the transaction's own earlier images read back
// from the file, and so do those of a later transaction in the same batch.
func TestMaterializeSpilledTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	partialImageTable(t, d)
	cfg := workerConfig(d, "spilling")
	startStreaming(t, d, cfg).stop(t)
	spilled := commitTxn(t, d, `INSERT INTO app.big VALUES (0, 'small', 'a');
		INSERT INTO app.big SELECT g, repeat(g::text, 5000), 'a' FROM generate_series(1, 3) g;
		UPDATE app.big SET v = 'b' WHERE id = 1; UPDATE app.big SET v = 'c' WHERE id = 1;
		DELETE FROM app.big WHERE id = 2; INSERT INTO app.big VALUES (2, repeat('n', 9000), 'a');
		UPDATE app.big SET v = 'b' WHERE id = 2;
		UPDATE app.big SET body = repeat('m', 8000) WHERE id = 3; UPDATE app.big SET v = 'b' WHERE id = 3;
		UPDATE app.big SET v = 'b' WHERE id = 0`)
	after := commitTxn(t, d, `UPDATE app.big SET v = 'd' WHERE id = 1; UPDATE app.big SET v = 'c' WHERE id = 3`)
	cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 500*time.Millisecond, -1, 1000
	logs := logTo(&cfg)
	cfg.Metrics = metrics.New(d.Pool)
	srv := httptest.NewServer(cfg.Metrics.Handler())
	defer srv.Close()
	startWorker(t, d, cfg)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 12, spilled)
	requireMaterializedOnce(t, d, 2, after)
	// Operators see it: one log line and the counters, for the large transaction only.
	if n := strings.Count(logs.String(), "large transaction spilled to disk"); n != 1 ||
		!strings.Contains(logs.String(), fmt.Sprintf("xid=%d ", spilled.xid)) {
		t.Fatalf("%d spill log lines, want 1 for xid %d:\n%s", n, spilled.xid, logs)
	}
	body := scrape(t, srv.URL)
	if n, b := metricValue(t, body, "synchro_capture_spilled_transactions_total"), metricValue(t, body, "synchro_capture_spilled_bytes_total"); n != 1 || b < 9000 {
		t.Fatalf("spill metrics: %v transactions, %v bytes; want 1 and at least the 9 kB row", n, b)
	}
	if n := queryInt(t, d, `SELECT count(DISTINCT xmin::text) FROM synchro.txn_ledger WHERE xid = ANY ($1)`,
		[]int64{spilled.xid, after.xid}); n != 1 {
		t.Fatalf("the spilled transaction and the one after it were materialized in %d batches, want 1", n)
	}
	// Projections and current versions hold every row as it is, body included.
	if bad := rowsOf(t, d, `SELECT b.id FROM app.big b
		LEFT JOIN synchro.projection p ON p.key = b.id::text
		LEFT JOIN synchro.synced_row s ON s.key = b.id::text
		LEFT JOIN synchro.row_version v ON v.version = s.version
		WHERE p.image IS DISTINCT FROM to_jsonb(b) OR v.image IS DISTINCT FROM to_jsonb(b)`); len(bad) != 0 {
		t.Fatalf("rows %v are not projected or versioned as they are", bad)
	}
	requireBodiesKept(t, d)
}

// TestSpillFailureRetriesWithoutQuarantine: a spill file the worker cannot
// write (here: its directory is missing) is the worker's trouble, not the
// transaction's: the session fails and retries, nothing is quarantined or
// acknowledged past the transaction, and a worker that can spill materializes
// it once.
func TestSpillFailureRetriesWithoutQuarantine(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "no-spill-dir")
	cfg.SpillDir = filepath.Join(t.TempDir(), "missing")
	logs := logTo(&cfg)
	w := startStreaming(t, d, cfg)
	c := commitTxn(t, d, `INSERT INTO app.docs SELECT g, repeat('x', 500) FROM generate_series(1, 20) g`)
	waitFor(t, "the spill failure logged twice (a retried session)", 30*time.Second, func() (bool, error) {
		return strings.Count(logs.String(), "spill file: create") >= 2, nil
	})
	waitState(t, d, "no-spill-dir", "retrying")
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("a spill failure quarantined %d transactions", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, c.xid); n != 0 {
		t.Fatalf("the transaction was materialized without its spill file")
	}
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	startWorker(t, d, workerConfig(d, "spills"))
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 20, c)
	requireDigests(t, d)
}

// TestMaterializeFollowsCommitOrder: of two overlapping source transactions, the
// one that commits first is materialized first, whichever began first.
func TestMaterializeFollowsCommitOrder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.docs (id text PRIMARY KEY, title text, owner text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner}"}')`)
	docs := tableID(t, d, "docs")
	startStreaming(t, d, workerConfig(d, "w1"))
	ctx := context.Background()
	connA, err := d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Release()
	exec := func(sql string) {
		t.Helper()
		if _, err := connA.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`BEGIN`)
	exec(`INSERT INTO app.docs VALUES ('a1', 'x', 'u1')`)
	var xidA int64
	if err := connA.QueryRow(ctx, `SELECT (pg_current_xact_id()::text::numeric % 4294967296)::bigint`).Scan(&xidA); err != nil {
		t.Fatal(err)
	}
	b := commitTxn(t, d, `INSERT INTO app.docs VALUES ('b1', 'x', 'u1')`)
	exec(`UPDATE app.docs SET title = 'y' WHERE id = 'a1'`)
	exec(`INSERT INTO app.docs VALUES ('a2', 'x', 'u1')`)
	exec(`COMMIT`)
	waitMaterialized(t, d)

	if got := rowsOf(t, d, `SELECT xid FROM synchro.txn_ledger ORDER BY commit_lsn`); !slices.Equal(got, []string{fmt.Sprint(b.xid), fmt.Sprint(xidA)}) {
		t.Fatalf("ledger order %v, want B (%d) then A (%d)", got, b.xid, xidA)
	}
	requireEffects(t, "effects", effects(t, d, ""), []effect{
		{txn: 0, scope: "user:u1", event: 0, ordNum: 0, tableID: docs, key: "b1", op: "upsert", version: rowVersion(t, d, "app.docs", "b1")},
		{txn: 1, scope: "user:u1", event: 1, ordNum: 0, tableID: docs, key: "a1", op: "upsert", version: rowVersion(t, d, "app.docs", "a1")},
		{txn: 1, scope: "user:u1", event: 2, ordNum: 0, tableID: docs, key: "a2", op: "upsert", version: rowVersion(t, d, "app.docs", "a2")},
	})
	if got := rowsOf(t, d, `SELECT row_count FROM synchro.scope_digest ORDER BY commit_lsn`); !slices.Equal(got, []string{"1", "3"}) {
		t.Fatalf("user:u1 row counts %v, want 1 then 3", got)
	}
	requireDigests(t, d)
}

// TestMaterializeSubtransactions: rows and fences of a rolled-back
// subtransaction vanish together; the rest of the transaction pairs and
// materializes. A row that leaves a scope and returns within the transaction
// gets one upsert in that scope and none elsewhere.
func TestMaterializeSubtransactions(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.docs (id text PRIMARY KEY, title text, owner text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner}"}')`)
	docs := tableID(t, d, "docs")
	startStreaming(t, d, workerConfig(d, "w1"))
	c := commitTxn(t, d, `
		INSERT INTO app.docs VALUES ('d1', 'x', 'u1');                 -- 0
		SAVEPOINT s;
		INSERT INTO app.docs VALUES ('d2', 'x', 'u1');
		UPDATE app.docs SET title = 'gone' WHERE id = 'd1';
		ROLLBACK TO SAVEPOINT s;
		UPDATE app.docs SET title = 'kept' WHERE id = 'd1';             -- 1
		INSERT INTO app.docs VALUES ('d3', 'x', 'u1');                 -- 2
		UPDATE app.docs SET owner = 'u2' WHERE id = 'd3';               -- 3
		UPDATE app.docs SET owner = 'u1' WHERE id = 'd3';               -- 4
		SAVEPOINT s2;
		INSERT INTO app.docs VALUES ('d4', 'x', 'u1');                 -- 5
		RELEASE SAVEPOINT s2;
		DO $$ BEGIN
			INSERT INTO app.docs VALUES ('d5', 'x', 'u1');
			RAISE EXCEPTION 'undo';
		EXCEPTION WHEN OTHERS THEN NULL;
		END $$`)
	waitMaterialized(t, d)
	commitLSN, _, events, applied := ledgerOf(t, d, c)
	if events != 6 || applied != 6 || len(c.fences) != 6 {
		t.Fatalf("event_count %d, applied_count %d, fences %d; want 6 each", events, applied, len(c.fences))
	}
	requireEffects(t, "effects", effects(t, d, commitLSN), []effect{
		{scope: "user:u1", event: 1, ordNum: 0, tableID: docs, key: "d1", op: "upsert", version: rowVersion(t, d, "app.docs", "d1")},
		{scope: "user:u1", event: 4, ordNum: 0, tableID: docs, key: "d3", op: "upsert", version: rowVersion(t, d, "app.docs", "d3")},
		{scope: "user:u1", event: 5, ordNum: 0, tableID: docs, key: "d4", op: "upsert", version: rowVersion(t, d, "app.docs", "d4")},
	})
	if got := queryText(t, d, `SELECT image ->> 'title' FROM synchro.projection WHERE key = 'd1'`); got != "kept" {
		t.Fatalf("projection of d1 has title %q", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership WHERE scope = 'user:u2'`); n != 0 {
		t.Fatalf("d3 has an edge in user:u2, a scope it left within the transaction")
	}
	requireDigests(t, d)
}

// TestMaterializeSQLRuleImpacts: a custom rule's membership query reads another
// relation's projection, and its impact query names the rows a change of that
// relation can move.
func TestMaterializeSQLRuleImpacts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.acl (id int PRIMARY KEY, team text);
		CREATE TABLE app.docs (id int PRIMARY KEY, acl_id int, title text);
		SELECT synchro.register_table('app.docs', '{"kind":"sql",
			"membership":"SELECT ''team:'' || (a.image->>''team'') FROM synchro.projected(''app.acl'') a WHERE a.key = $1->>''acl_id''",
			"impacts":{"app.acl":"SELECT d.key FROM synchro.projected(''app.docs'') d WHERE d.image->>''acl_id'' = $1->>''id''"}}')`)
	docs := tableID(t, d, "docs")
	startStreaming(t, d, workerConfig(d, "w1"))
	step := docsStep(t, d, docs)
	step(`INSERT INTO app.acl VALUES (1, 'red'), (2, 'blue')`)
	step(`INSERT INTO app.docs VALUES (10, 1, 'a'), (2, 1, 'b'), (3, 2, 'c')`,
		effect{scope: "team:blue", event: 2, key: "3", op: "upsert"},
		effect{scope: "team:red", event: 0, key: "10", op: "upsert"},
		effect{scope: "team:red", event: 1, key: "2", op: "upsert"})
	step(`UPDATE app.acl SET team = 'green' WHERE id = 1`,
		effect{scope: "team:green", event: 0, ordNum: 0, key: "2", op: "upsert"},
		effect{scope: "team:green", event: 0, ordNum: 1, key: "10", op: "upsert"},
		effect{scope: "team:red", event: 0, ordNum: 0, key: "2", op: "delete"},
		effect{scope: "team:red", event: 0, ordNum: 1, key: "10", op: "delete"})
	step(`UPDATE app.docs SET acl_id = 2 WHERE id = 10; UPDATE app.acl SET team = 'blue2' WHERE id = 2`,
		effect{scope: "team:blue", event: 1, ordNum: 0, key: "3", op: "delete"},
		effect{scope: "team:blue2", event: 1, ordNum: 0, key: "3", op: "upsert"},
		effect{scope: "team:blue2", event: 1, ordNum: 1, key: "10", op: "upsert"},
		effect{scope: "team:green", event: 1, ordNum: 0, key: "10", op: "delete"})
	step(`DELETE FROM app.acl WHERE id = 1`,
		effect{scope: "team:green", event: 0, key: "2", op: "delete"})
	requireEffectVersions(t, d)
	requireDigests(t, d)
}

// docsStep returns a function that commits one transaction, waits until it is
// materialized and requires exactly the given effects of app.docs (table id
// docs) at its position; upserts carry the row's current version.
func docsStep(t *testing.T, d *testdb.DB, docs int) func(sql string, want ...effect) {
	return func(sql string, want ...effect) {
		t.Helper()
		c := commitTxn(t, d, sql)
		waitMaterialized(t, d)
		commitLSN, _, _, _ := ledgerOf(t, d, c)
		for i := range want {
			want[i].tableID = docs
			if want[i].op == "upsert" {
				want[i].version = rowVersion(t, d, "app.docs", want[i].key)
			}
		}
		requireEffects(t, sql, effects(t, d, commitLSN), want)
	}
}

// TestMaterializeScratchReplacesOlderLayout: a worker session that created the
// scratch tables under an older function bundle (its layout marker differs) gets
// them dropped and recreated in the current layout, with the worker's temporary
// buffers when it had not used temporary tables yet.
func TestMaterializeScratchReplacesOlderLayout(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT synchro.materialize_scratch()`); err != nil {
		t.Fatal(err)
	}
	var buffers string
	if err := conn.QueryRow(ctx, `SHOW temp_buffers`).Scan(&buffers); err != nil || buffers != "8MB" {
		t.Fatalf("temp_buffers after the first scratch: %q, %v", buffers, err)
	}
	// Simulate an older layout: another marker and an older shape of one table.
	if _, err := conn.Exec(ctx, `
		DROP TABLE pg_temp.synchro_seg_layout_9, pg_temp.synchro_seg_event;
		CREATE TEMP TABLE synchro_seg_layout_2 ();
		CREATE TEMP TABLE synchro_seg_event (stale integer);
		SELECT synchro.materialize_scratch()`); err != nil {
		t.Fatal(err)
	}
	var tables, seqColumns int
	if err := conn.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema() AND relkind = 'r' AND relname LIKE 'synchro\_seg\_%'),
		       (SELECT count(*) FROM pg_attribute WHERE attrelid = 'pg_temp.synchro_seg_event'::regclass AND attname = 'seq')`).
		Scan(&tables, &seqColumns); err != nil {
		t.Fatal(err)
	}
	// Seven scratch tables plus the layout marker; the stale ones are gone.
	if tables != 8 || seqColumns != 1 {
		t.Fatalf("after rebuilding an older layout: %d scratch tables, seq column present %d", tables, seqColumns)
	}
	var old bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('pg_temp.synchro_seg_layout_2') IS NOT NULL`).Scan(&old); err != nil || old {
		t.Fatalf("older layout marker still present (%v)", err)
	}
}

// TestMaterializeLongKeysAndScopes: keys and scopes as long as the membership
// index allows (the scope and diff scratch tables keep them uncompressed, without
// TOAST) materialize, move between scopes and leave them like short ones.
func TestMaterializeLongKeysAndScopes(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.notes (id text PRIMARY KEY, owner text);
		SELECT synchro.register_table('app.notes', '{"kind":"column","template":"user:{owner}"}')`)
	startStreaming(t, d, workerConfig(d, "w1"))
	key, owner, other := strings.Repeat("k", 1000), strings.Repeat("o", 1000), strings.Repeat("p", 1000)
	commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.notes VALUES ('%s', '%s'), ('short', '%s')`, key, owner, owner))
	commitTxn(t, d, fmt.Sprintf(`UPDATE app.notes SET owner = '%s' WHERE id = '%s'`, other, key))
	waitMaterialized(t, d)
	got := rowsOf(t, d, `SELECT length(scope), length(key), to_lsn IS NULL FROM synchro.membership ORDER BY 3, 2, 1`)
	want := []string{"1005|1000|false", "1005|5|true", "1005|1000|true"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("membership edges (scope length, key length, open): %v, want %v", got, want)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.effect WHERE op = 'delete' AND length(key) = 1000`); n != 1 {
		t.Fatalf("%d deletes of the long key from its old scope, want 1", n)
	}
	requireDigests(t, d)
}

// TestMaterializeReplayedTransactionIsNoOp: a batch that repeats a durable
// transaction with all its events (as a replay from a slot behind the
// acknowledgement could) creates nothing for it, while the new transaction
// after it in the same batch materializes with exactly its own event.
func TestMaterializeReplayedTransactionIsNoOp(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ownedDocs(t, d)
	w := startStreaming(t, d, workerConfig(d, "w1"))
	c := commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'a'), (2, 'b')`)
	waitMaterialized(t, d)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	commitLSN, _, _, _ := ledgerOf(t, d, c)
	state := func() []string {
		return rowsOf(t, d, `
			SELECT 'ledger', commit_lsn::text, event_count, applied_count FROM synchro.txn_ledger
			UNION ALL SELECT 'event', commit_lsn::text, event_ordinal, NULL FROM synchro.event_ledger
			UNION ALL SELECT 'version ' || key, commit_lsn::text, event_ordinal, checksum FROM synchro.row_version
			UNION ALL SELECT 'edge ' || scope || ' ' || key, from_lsn::text, NULL, NULL FROM synchro.membership
			UNION ALL SELECT 'effect ' || scope || ' ' || key, commit_lsn::text, event_ordinal, effect_ordinal FROM synchro.effect
			UNION ALL SELECT 'digest ' || scope, commit_lsn::text, row_count, digest FROM synchro.scope_digest
			ORDER BY 1, 2, 3, 4`)
	}
	before := state()

	// The durable transaction rebuilt from the ledgers with its events and
	// images, then a new transaction whose fence is recorded by hand.
	replayThenMaterialize(t, d, commitLSN, newEvent{relationID: queryInt(t, d, `SELECT relation_id FROM synchro.fence LIMIT 1`),
		key: "3", op: "insert", image: `{"id": 3, "owner": "a"}`, fenceID: "00000000-0000-0000-0000-0000000000f3", version: "v3"})

	after := state()
	var added []string
	for _, r := range after {
		if !slices.Contains(before, r) {
			added = append(added, r)
		}
	}
	for _, r := range before {
		if !slices.Contains(after, r) {
			t.Errorf("the replay changed durable state: %s is gone", r)
		}
	}
	want := []string{
		"digest user:a|FFFF/0|2|", // row count 2; the digest value is checked by requireDigests
		"edge user:a 3|FFFF/0|<nil>|<nil>",
		"effect user:a 3|FFFF/0|0|0",
		"event|FFFF/0|0|<nil>",
		"ledger|FFFF/0|1|1",
		"version 3|FFFF/0|0|",
	}
	if len(added) != len(want) {
		t.Fatalf("rows added by the batch:\n%s\nwant exactly the new transaction's:\n%s", strings.Join(added, "\n"), strings.Join(want, "\n"))
	}
	for i, r := range added {
		if !strings.HasPrefix(r, want[i]) {
			t.Fatalf("rows added by the batch:\n%s\nwant exactly the new transaction's:\n%s", strings.Join(added, "\n"), strings.Join(want, "\n"))
		}
	}
	requireDigests(t, d)
	if got := rowsOf(t, d, `SELECT materialized_commit_lsn::text FROM synchro.progress`); !slices.Equal(got, []string{"FFFF/0"}) {
		t.Fatalf("high-watermark %v after the batch, want FFFF/0", got)
	}

	// A transaction behind the high-watermark that is not durable is refused,
	// and the batch changes nothing.
	before = state()
	_, err := d.Pool.Exec(context.Background(), `SELECT synchro.materialize_scratch(); SELECT synchro.materialize_transaction(jsonb_build_array(
		jsonb_build_object('commit_lsn', '1/0', 'end_lsn', '1/10', 'xid', 3, 'commit_time', now(),
		                   'event_count', 0, 'applied', 0, 'registry_generation', 1),
		jsonb_build_object('commit_lsn', 'FFFF/100', 'end_lsn', 'FFFF/110', 'xid', 3, 'commit_time', now(),
		                   'event_count', 0, 'applied', 0, 'registry_generation', 1)))`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "XX001" || !strings.Contains(pgErr.Message, "not durable") {
		t.Fatalf("batch with a non-durable transaction behind the high-watermark: %v, want XX001", err)
	}
	if after := state(); !slices.Equal(after, before) {
		t.Fatalf("the refused batch changed durable state:\n%s\nwas:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}

	// A batch that does not list its transactions in commit order is refused,
	// and changes nothing.
	_, err = d.Pool.Exec(context.Background(), `SELECT synchro.materialize_scratch(); SELECT synchro.materialize_transaction(jsonb_build_array(
		jsonb_build_object('commit_lsn', 'FFFF/200', 'end_lsn', 'FFFF/210', 'xid', 3, 'commit_time', now(),
		                   'event_count', 0, 'applied', 0, 'registry_generation', 1),
		jsonb_build_object('commit_lsn', 'FFFF/100', 'end_lsn', 'FFFF/110', 'xid', 3, 'commit_time', now(),
		                   'event_count', 0, 'applied', 0, 'registry_generation', 1)))`)
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "commit order") {
		t.Fatalf("batch out of commit order: %v, want 22023", err)
	}
	if after := state(); !slices.Equal(after, before) {
		t.Fatalf("the refused batch changed durable state:\n%s\nwas:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}

	// The staged events must be exactly the ones the batch counts, each under its
	// transaction's place and commit_lsn; a second batch in one database
	// transaction is refused too. Each refused batch changes nothing.
	const batch = `SELECT synchro.materialize_transaction(jsonb_build_array(
		jsonb_build_object('commit_lsn', 'FFFF/300', 'end_lsn', 'FFFF/310', 'xid', 3, 'commit_time', now(),
		                   'event_count', 1, 'applied', 1, 'registry_generation', 1)))`
	const event = `INSERT INTO synchro_seg_event (seq, commit_lsn, o, r, k, op, img, partial, f, v)
		SELECT %d, '%s', %d, relation_id, '4', 'insert', '{"id": 4, "owner": "a"}', false, gen_random_uuid(), 'v4'
		FROM synchro.relation LIMIT 1;`
	for _, tc := range []struct{ name, stage, message string }{
		{"missing", ``, "staged events"},
		{"extra", fmt.Sprintf(event, 1, "FFFF/300", 0) + fmt.Sprintf(event, 1, "FFFF/300", 1), "staged events"},
		{"other_commit_lsn", fmt.Sprintf(event, 1, "FFFF/200", 0), "staged events"},
		{"other_place", fmt.Sprintf(event, 1, "FFFF/300", 0) + fmt.Sprintf(event, 2, "FFFF/300", 1), "staged events"},
		{"second_batch", strings.Replace(batch, "'applied', 1", "'applied', 0", 1) + ";", "one batch per database transaction"},
	} {
		_, err = d.Pool.Exec(context.Background(), `SELECT synchro.materialize_scratch();`+tc.stage+batch)
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, tc.message) {
			t.Fatalf("%s: %v, want 22023 %q", tc.name, err, tc.message)
		}
		if after := state(); !slices.Equal(after, before) {
			t.Fatalf("%s: the refused batch changed durable state:\n%s\nwas:\n%s", tc.name, strings.Join(after, "\n"), strings.Join(before, "\n"))
		}
	}

	// In a session that never created the scratch tables the batch is refused
	// (55000): only its caller creates them and stages the events.
	conn, err := pgconn.Connect(context.Background(), d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), batch).ReadAll()
	if !errors.As(err, &pgErr) || pgErr.Code != "55000" || !strings.Contains(pgErr.Message, "no staged batch") {
		t.Fatalf("batch without scratch tables: %v, want 55000 no staged batch", err)
	}
	if after := state(); !slices.Equal(after, before) {
		t.Fatalf("the refused batch changed durable state:\n%s\nwas:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
}

// TestMaterializeTransactionLargerThanOneValue: one source transaction whose row
// images add up to more than one jsonb value can hold (256MB; about 280MB here:
// 2,000 rows of 140kB, compressed on disk, whole in the WAL stream) materializes
// like any other. Its events are copied into the materialization's scratch table
// instead of travelling in one value, which failed with 54000 and blocked the
// stream for good.
func TestMaterializeTransactionLargerThanOneValue(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.big (id int PRIMARY KEY, body text, owner text);
		SELECT synchro.register_table('app.big', '{"kind":"column","template":"user:{owner}"}')`)
	startStreaming(t, d, workerConfig(d, "w1"))
	c := commitTxn(t, d, `INSERT INTO app.big SELECT g, repeat(chr(97 + g % 26), 140000), 'u' || g % 10 FROM generate_series(1, 2000) g`)
	waitFor(t, "the large transaction materialized", 5*time.Minute, func() (bool, error) {
		var done bool
		err := d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM synchro.txn_ledger WHERE xid = $1)
			OR EXISTS (SELECT FROM synchro.poison_txn)`, c.xid).Scan(&done)
		return done, err
	})
	if p := queryText(t, d, `SELECT coalesce(string_agg(failure_class || ' ' || coalesce(sqlstate, ''), ', '), '') FROM synchro.poison_txn`); p != "" {
		t.Fatalf("the large transaction was quarantined: %s", p)
	}
	if _, _, events, applied := ledgerOf(t, d, c); events != 2000 || applied != 2000 {
		t.Fatalf("ledger: %d events, %d applied, want 2000 and 2000", events, applied)
	}
	got := rowsOf(t, d, `SELECT (SELECT count(*) FROM synchro.projection WHERE length(image ->> 'body') = 140000),
		(SELECT count(*) FROM synchro.row_version WHERE length(image ->> 'body') = 140000),
		(SELECT count(*) FROM synchro.effect WHERE op = 'upsert'),
		(SELECT count(*) FROM synchro.fence f WHERE NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id))`)
	if !slices.Equal(got, []string{"2000|2000|2000|0"}) {
		t.Fatalf("projections, versions, upserts with the whole body, unmaterialized fences: %v, want 2000|2000|2000|0", got)
	}
	requireDigests(t, d)
}

// TestPartialImageWithoutProjectionIsQuarantined: a row with no projection
// (a populated relation's rows get theirs from its bootstrap, but the rows of
// a partition attached while populated have none; here the row's projection
// is removed).
// An update that leaves its out-of-line value out of the image (pgoutput sends
// such partial images: the key guard returns the row untouched) cannot be
// completed: the transaction is quarantined rather than
// published without the column.
func TestPartialImageWithoutProjectionIsQuarantined(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.big (id int PRIMARY KEY, body text, v text);
		ALTER TABLE app.big ALTER COLUMN body SET STORAGE EXTERNAL;
		SELECT synchro.register_table('app.big', '{"kind":"shared","scope":"all"}')`)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.big VALUES (1, repeat('SECRET-', 1000), 'before')`)
	waitMaterialized(t, d)
	d.Exec(t, `DELETE FROM synchro.projection`)
	bad := commitTxn(t, d, `UPDATE app.big SET v = 'SECRET-123' WHERE id = 1`)
	later := commitTxn(t, d, `INSERT INTO app.big VALUES (2, 'small', 'after')`)
	waitPoison(t, d)
	p := readPoison(t, d, bad)
	if p.class != capture.ClassMaterialize || derefS(p.sqlstate) != "XX001" || p.xid != bad.xid {
		t.Fatalf("poison record %+v (sqlstate %s), want materialize_error XX001 of xid %d", p, derefS(p.sqlstate), bad.xid)
	}
	requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.projection`); n != 0 {
		t.Fatalf("%d projections, want none", n)
	}
	requireRedacted(t, d, log)
}

// materializeInOneBatch stops first, the database's worker, commits each of
// workload as a transaction of its own, then starts a worker (wb) that takes
// them all in one batch, waits until they are materialized and asserts that one
// materializing transaction did it.
func materializeInOneBatch(t *testing.T, d *testdb.DB, first *runningWorker, workload []string) {
	t.Helper()
	if n := materializeInBatches(t, d, first, workload, 1000); n != 1 {
		t.Fatalf("the workload materialized in %d batches, want one", n)
	}
}

// materializeInBatches stops first, the database's worker, commits each of
// workload as a transaction of its own, then starts a worker (wb) whose batches
// hold at most maxTxns transactions and go only when full or after 500 ms (no
// quiet gap), waits until they are materialized and returns the number of
// materializing transactions (batches) that did it.
func materializeInBatches(t *testing.T, d *testdb.DB, first *runningWorker, workload []string, maxTxns int) int64 {
	t.Helper()
	if err := first.stop(t); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	before := queryText(t, d, `SELECT coalesce(max(commit_lsn), '0/0')::text FROM synchro.txn_ledger`)
	commitEach(t, d, workload)
	cfg := workerConfig(d, "wb")
	cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 500*time.Millisecond, -1, maxTxns
	startWorker(t, d, cfg)
	waitMaterialized(t, d)
	return queryInt(t, d, `SELECT count(DISTINCT xmin::text) FROM synchro.txn_ledger WHERE commit_lsn > $1::pg_lsn`, before)
}

// newEvent is the one event of a transaction made up by hand (its fence is
// recorded by replayThenMaterialize).
type newEvent struct {
	relationID                       int64
	key, op, image, fenceID, version string
}

// replayThenMaterialize hands materialize_transaction a batch of the durable
// transaction at commitLSN, rebuilt from the ledgers with its events and
// their projected images (a replay), followed by a new transaction at FFFF/0
// with the one event ev, whose fence it records first.
func replayThenMaterialize(t *testing.T, d *testdb.DB, commitLSN string, ev newEvent) {
	t.Helper()
	if err := tryReplayThenMaterialize(t, d, commitLSN, ev); err != nil {
		t.Fatalf("replay batch: %v", err)
	}
}

// tryReplayThenMaterialize is replayThenMaterialize, returning the error that
// rolled the batch back.
func tryReplayThenMaterialize(t *testing.T, d *testdb.DB, commitLSN string, ev newEvent) error {
	t.Helper()
	d.Exec(t, `INSERT INTO synchro.fence (fence_id, relation_id, op, key, version, dml_ordinal, xid)
		SELECT $1::uuid, $2, $3, $4, $5, 1, (SELECT xid FROM synchro.fence LIMIT 1)`,
		ev.fenceID, ev.relationID, ev.op, ev.key, ev.version)
	// One database transaction, as the worker runs it: the scratch tables are
	// the session's.
	ctx := context.Background()
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	for _, step := range []struct {
		sql  string
		args []any
	}{
		{`SELECT synchro.materialize_scratch()`, nil},
		{`INSERT INTO synchro_seg_event (seq, commit_lsn, o, r, k, op, img, partial, f, v)
		SELECT 1, e.commit_lsn, e.event_ordinal, e.relation_id, e.key, e.op, pr.image, false, e.fence_id, e.version
		FROM synchro.event_ledger e
		LEFT JOIN synchro.projection pr ON pr.relation_id = e.relation_id AND pr.key = e.key
		WHERE e.commit_lsn = $1::pg_lsn
		UNION ALL
		SELECT 2, 'FFFF/0', 0, $2, $3, $4, $5::jsonb, false, $6::uuid, $7`,
			[]any{commitLSN, ev.relationID, ev.key, ev.op, ev.image, ev.fenceID, ev.version}},
		{`SELECT synchro.materialize_transaction(jsonb_build_array(
		(SELECT jsonb_build_object('commit_lsn', l.commit_lsn, 'end_lsn', l.end_lsn, 'xid', l.xid, 'commit_time', l.commit_time,
		        'event_count', l.event_count, 'applied', l.applied_count, 'registry_generation', p.registry_generation)
		 FROM synchro.txn_ledger l, synchro.progress p WHERE l.commit_lsn = $1::pg_lsn),
		(SELECT jsonb_build_object('commit_lsn', 'FFFF/0', 'end_lsn', 'FFFF/10',
		        'xid', (SELECT f.xid::text::bigint % 4294967296 FROM synchro.fence f WHERE f.fence_id = $2::uuid), 'commit_time', l.commit_time,
		        'event_count', 1, 'applied', 1, 'registry_generation', p.registry_generation)
		 FROM synchro.txn_ledger l, synchro.progress p WHERE l.commit_lsn = $1::pg_lsn)))`, []any{commitLSN, ev.fenceID}},
	} {
		if _, err := tx.Exec(ctx, step.sql, step.args...); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// TestMaterializationErrorsQuoteNoRowValues: a scope rule that fails on a row
// raises an error quoting the row's value (here a cast's "invalid input
// syntax for type integer"). PostgreSQL writes the error that ends the
// materializing statement to its log, and the worker receives it: it is raised
// again with its SQLSTATE only, so neither quotes the row.
func TestMaterializationErrorsQuoteNoRowValues(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	w := startStreaming(t, d, workerConfig(d, "w1"))
	c := commitTxn(t, d, `INSERT INTO app.other VALUES (1, 'plain')`)
	waitMaterialized(t, d)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	commitLSN, _, _, _ := ledgerOf(t, d, c)
	err := tryReplayThenMaterialize(t, d, commitLSN, newEvent{
		relationID: queryInt(t, d, `SELECT relation_id FROM synchro.relation WHERE relation_oid = 'app.c'::regclass`),
		key:        "1", op: "insert", image: `{"id": 1, "n": "SECRET-7x"}`,
		fenceID: "00000000-0000-0000-0000-0000000000c1", version: "v1"})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22P02" {
		t.Fatalf("materializing a row its rule cannot evaluate: %v, want SQLSTATE 22P02", err)
	}
	if !strings.Contains(pgErr.Message, "materialization failed with SQLSTATE 22P02") {
		t.Fatalf("error message %q does not name the failure", pgErr.Message)
	}
	for what, text := range map[string]string{"message": pgErr.Message, "detail": pgErr.Detail, "hint": pgErr.Hint,
		"context": pgErr.Where, "internal query": pgErr.InternalQuery} {
		if strings.Contains(text, "SECRET") {
			t.Fatalf("the error's %s quotes the row: %q", what, text)
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.projection WHERE key = '1' AND image ? 'n'`); n != 0 {
		t.Fatalf("the failed batch left %d projections", n)
	}
}
