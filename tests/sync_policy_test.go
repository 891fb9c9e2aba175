package tests

import (
	"strings"
	"testing"
)

// TestSyncCustomWritePolicy: a function registered with synchro.set_write_policy
// replaces the default policy of its table and sees the op and both live images;
// a refusal rolls the mutation back; NULL restores the default. A function of
// the wrong shape is rejected with a clear error.
func TestSyncCustomWritePolicy(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one')`)
	e.d.Exec(t, `CREATE FUNCTION app.docs_policy(user_id text, op text, table_name text, before jsonb, after jsonb)
		RETURNS boolean LANGUAGE sql AS $$
			SELECT table_name = 'docs' AND op <> 'delete'
			   AND coalesce(after ->> 'title', '') NOT LIKE 'forbidden%'
			   AND (before IS NULL OR before ->> 'owner_id' = user_id) $$;
		SELECT synchro.set_write_policy('app.docs', 'app.docs_policy(text,text,text,jsonb,jsonb)')`)
	e.connect(t, "u1", "c1")
	resp := e.push(t, "u1", "c1",
		// Allowed by the custom policy although the default would refuse it (owner u2).
		mut("m1", "docs", "insert", map[string]any{"id": "d2"}, map[string]any{"owner_id": "u2", "title": "gift"}),
		mut("m2", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "forbidden title"}),
		mut("m3", "docs", "delete", map[string]any{"id": "d1"}, nil),
	)
	if list, o := outcome(t, resp, "m1"); list != "accepted" {
		t.Fatalf("m1: %v", o)
	}
	for _, id := range []string{"m2", "m3"} {
		if _, o := outcome(t, resp, id); o["code"] != "policy_rejected" {
			t.Fatalf("%s: %v", id, o)
		}
	}
	if got := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); got != "one" {
		t.Fatalf("refused update changed the row: title %q", got)
	}
	e.d.Exec(t, `SELECT synchro.set_write_policy('app.docs', NULL)`)
	resp = e.push(t, "u1", "c1", mut("m4", "docs", "insert", map[string]any{"id": "d3"}, map[string]any{"owner_id": "u2"}))
	if _, o := outcome(t, resp, "m4"); o["code"] != "policy_rejected" {
		t.Fatalf("default policy is back: m4 %v", o)
	}
	e.d.Exec(t, `CREATE FUNCTION app.bad_policy(user_id text) RETURNS boolean LANGUAGE sql AS 'SELECT true'`)
	err := e.d.ExecErr(`SELECT synchro.set_write_policy('app.docs', 'app.bad_policy(text)')`)
	if err == nil || !strings.Contains(err.Error(), "must be a function (user_id text, op text, table_name text, before jsonb, after jsonb) RETURNS boolean") {
		t.Fatalf("bad policy: %v", err)
	}
}
