package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestHotPathFunctionsAreInlined: the SQL functions that run once per row, per
// mutation or per batch and are written to be inlined (no SET clause,
// schema-qualified names) are inlined by the planner: a SQL function that is not
// is parsed and planned again in every execution of the query calling it
// (docs/decisions.md, "Push throughput"). A SET clause or an unqualified name
// added to one of them shows here as its name in the plan.
func TestHotPathFunctionsAreInlined(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	// Two-row VALUES lists: the arguments are columns, not constants that the
	// planner would fold a call of an immutable function into.
	for fn, query := range map[string]string{
		// The worker's position read before every batch.
		"slot_problem": `SELECT s.* FROM (VALUES ('synchro'::name), ('other')) x(slot), synchro.slot_problem(x.slot) s`,
		// Materialization and push, per changed row.
		"scopes_of": `SELECT s.* FROM (VALUES ('{"kind":"column","template":"user:{owner}"}'::jsonb, 'k', '{"owner":"u"}'::jsonb),
			('{"kind":"shared","scope":"all"}', 'l', '{}')) x(r, k, i), synchro.scopes_of(x.r, x.k, x.i, false) s`,
		"render_template": `SELECT synchro.render_template(x.t, x.i) FROM (VALUES ('user:{owner}', '{"owner":"u"}'::jsonb), ('a:{b}', '{}')) x(t, i)`,
		"row_checksum":    `SELECT synchro.row_checksum(x.id, x.k, x.i) FROM (VALUES (1, 'k', '{"owner":"u"}'::jsonb), (2, 'l', '{}')) x(id, k, i)`,
	} {
		rows, err := d.Pool.Query(context.Background(), `EXPLAIN (VERBOSE, COSTS OFF) `+query)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		// An inlined render_template calls render_template_loop: the call is the name and "(".
		if plan := strings.Join(lines, "\n"); strings.Contains(plan, fn+"(") {
			t.Errorf("synchro.%s is not inlined:\n%s", fn, plan)
		}
	}
}

// TestWireTypeErrorCallsPortableTypeOncePerColumn: push's type check of a
// mutation's columns calls synchro.portable_type once per column. Flattened
// into the query, its subquery called it again for each of a dozen references,
// which with a SQL portable_type cost 0.9 ms per three-column mutation.
func TestWireTypeErrorCallsPortableTypeOncePerColumn(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.typed (id text PRIMARY KEY, a text, b integer, c timestamptz, e boolean)`)
	ctx := context.Background()
	tx := countingCalls(t, d.URL)
	var problem *string
	var calls int64
	if err := tx.QueryRow(ctx, `SELECT synchro.wire_type_error('app.typed'::regclass,
		'{"id": "x", "a": "y", "b": 1, "c": "2026-12-02T00:00:00Z", "e": true}')`).Scan(&problem); err != nil {
		t.Fatal(err)
	}
	if problem != nil {
		t.Fatalf("wire_type_error refused well-typed columns: %s", *problem)
	}
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
		WHERE schemaname = 'synchro' AND funcname = 'portable_type'`).Scan(&calls); err != nil {
		t.Fatal(err)
	}
	if calls != 5 {
		t.Fatalf("synchro.portable_type was called %d times for 5 columns, want 5", calls)
	}
}

// TestPushEvaluatesScopeRulesInline: a push evaluates scope rules (the policy
// before and after each write, the answer's visibility, what materialization
// will evaluate) with synchro.scopes_of inlined into the calling queries. A call
// of it in a select list is not inlined (a set-returning function is inlined
// only in FROM) and planned its body again for every mutation: about a fifth of
// a warm 50-mutation push. A SQL function that runs is counted in
// pg_stat_xact_user_functions; an inlined one is not.
func TestPushEvaluatesScopeRulesInline(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	e.connect(t, "u1", "c1")
	ctx := context.Background()
	tx := countingCalls(t, e.d.URL)
	var resp string
	if err := tx.QueryRow(ctx, `SELECT synchro.push('u1', $1::jsonb, 8388608)::text`,
		`{"client_id":"c1","mutations":[
			{"mutation_id":"m1","table":"docs","op":"insert","pk":{"id":"d1"},"columns":{"owner_id":"u1"}},
			{"mutation_id":"m2","table":"docs","op":"update","pk":{"id":"d1"},"columns":{"title":"t"}},
			{"mutation_id":"m3","table":"docs","op":"delete","pk":{"id":"d1"}}]}`).Scan(&resp); err != nil {
		t.Fatal(err)
	}
	if strings.Count(resp, `"status": "applied"`) != 3 {
		t.Fatalf("push answered %s, want three mutations applied", resp)
	}
	var calls int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
		WHERE schemaname = 'synchro' AND funcname = 'scopes_of'`).Scan(&calls); err != nil {
		t.Fatal(err)
	}
	if calls != 0 {
		t.Fatalf("synchro.scopes_of ran as a function %d times in a push of 3 mutations, want it inlined (0)", calls)
	}
}

// countingCalls opens a transaction in a session of its own that counts the
// calls of every function (track_functions = all), rolled back at the test's
// end. A session of its own: function statistics not yet flushed are shown for
// the whole session, not just its current transaction.
func countingCalls(t *testing.T, url string) pgx.Tx {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'all'`); err != nil {
		t.Fatal(err)
	}
	return tx
}
