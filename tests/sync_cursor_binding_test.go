package tests

import (
	"net/http"
	"testing"
)

// cursorBindingSetup is a project-scoped table (column rule project:{project_id})
// and a scope assignment read live from a members table: a user is assigned
// project:<id> for every membership. u1 and u3 are members of p.
const cursorBindingSetup = `
CREATE TABLE app.members (project_id text NOT NULL, user_id text NOT NULL, PRIMARY KEY (project_id, user_id));
CREATE TABLE app.items (id text PRIMARY KEY, project_id text NOT NULL, body text);
SELECT synchro.register_table('app.items', '{"kind":"column","template":"project:{project_id}"}');
INSERT INTO app.members VALUES ('p', 'u1'), ('p', 'u3');
INSERT INTO app.items VALUES ('i1', 'p', 'one'), ('i2', 'p', 'two'), ('i3', 'p', 'three');
CREATE FUNCTION app.project_scopes(u text) RETURNS SETOF text LANGUAGE sql STABLE
    AS $$ SELECT 'project:' || project_id FROM app.members WHERE user_id = u $$;
SELECT synchro.set_scope_assignment('app.project_scopes(text)');
`

// cbPull pulls scope with cursor for client as user and returns the 200 answer.
func (e *syncEnv) cbPull(t *testing.T, user, client, scope string, cursor any) map[string]any {
	t.Helper()
	return requireOK(t, "pull", e.post(t, user, "/sync/pull", map[string]any{"client_id": client,
		"scopes": map[string]any{scope: map[string]any{"cursor": cursor}}}))
}

// cbConnect connects client as user knowing scope at cursor and returns the 200 answer.
func (e *syncEnv) cbConnect(t *testing.T, user, client, scope string, cursor any) map[string]any {
	t.Helper()
	return requireOK(t, "connect", e.post(t, user, "/sync/connect", map[string]any{"client_id": client, "protocol_version": 3,
		"known_scopes": map[string]any{scope: map[string]any{"cursor": cursor}}}))
}

// cbRequireRebuild fails unless a pull answer puts scope in rebuild with no
// changes, no cursor for it, and none of the leaked values in the answer.
func cbRequireRebuild(t *testing.T, what string, resp map[string]any, scope string, leaked ...string) {
	t.Helper()
	epRequireList(t, what+": rebuild", epStrings(resp["rebuild"]), scope)
	if n := len(resp["changes"].([]any)); n != 0 {
		t.Fatalf("%s: %d changes: %v", what, n, resp["changes"])
	}
	if c, ok := resp["scope_cursors"].(map[string]any)[scope]; ok {
		t.Fatalf("%s: a cursor for %s: %v", what, scope, c)
	}
	epRequireNoLeak(t, what, mustMarshalBytes(t, resp), leaked...)
}

// TestSyncCursorReassignedScope: a scope cursor resumes only while its scope
// has stayed assigned to the client since the cursor was issued. u3 is removed
// from project p (its pull sees the scope in scope_updates.remove), a row is
// written into p and moved out of it, u3 is added again: u3's old cursor puts
// project:p in rebuild in pull and in connect, and nothing written while u3 was
// out is delivered. u1, a member throughout, resumes and gets the row's upsert
// and delete; u3's fresh rebuild resumes too.
func TestSyncCursorReassignedScope(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, cursorBindingSetup)
	const scope = "project:p"
	e.connect(t, "u1", "c1")
	e.connect(t, "u3", "c3")
	r1, r3 := newReplica(), newReplica()
	e.rebuildScope(t, "u1", "c1", scope, 1000, r1)
	c3 := e.rebuildScope(t, "u3", "c3", scope, 1000, r3)["final_scope_cursor"]

	// Continuously assigned: the cursor of the same client resumes, also in connect.
	e.d.Exec(t, `UPDATE app.items SET body = 'one, edited' WHERE id = 'i1'`)
	waitMaterialized(t, e.d)
	resp := e.cbPull(t, "u3", "c3", scope, c3)
	epRequireList(t, "member pull: rebuild", epStrings(resp["rebuild"]))
	if n := len(resp["changes"].([]any)); n != 1 {
		t.Fatalf("member pull: %d changes, want the edit of i1: %v", n, resp["changes"])
	}
	r3.apply(t, resp)
	e.requireConverged(t, r3, scope)
	c3 = r3.cursors[scope]
	epRequireList(t, "member connect: rebuild", epStrings(e.cbConnect(t, "u3", "c3", scope, c3)["rebuild"]))

	// u3 leaves p; its pull observes the removal.
	e.d.Exec(t, `DELETE FROM app.members WHERE project_id = 'p' AND user_id = 'u3'`)
	resp = e.cbPull(t, "u3", "c3", scope, c3)
	epRequireList(t, "pull after leaving: remove", epStrings(resp["scope_updates"].(map[string]any)["remove"]), scope)
	epRequireList(t, "pull after leaving: rebuild", epStrings(resp["rebuild"]))
	if len(resp["changes"].([]any)) != 0 || len(resp["scope_cursors"].(map[string]any)) != 0 {
		t.Fatalf("pull after leaving served the scope: %v", resp)
	}

	// Written while u3 is out: r2 enters p, then moves to secret-proj.
	e.d.Exec(t, `INSERT INTO app.items VALUES ('r2', 'p', 'zz-while-out-zz')`)
	e.d.Exec(t, `UPDATE app.items SET project_id = 'secret-proj', body = 'zz-secret-zz' WHERE id = 'r2'`)
	waitMaterialized(t, e.d)

	// u3 is added again: the old cursor does not resume.
	e.d.Exec(t, `INSERT INTO app.members VALUES ('p', 'u3')`)
	resp = e.cbPull(t, "u3", "c3", scope, c3)
	cbRequireRebuild(t, "pull with the cursor from before the removal", resp, scope, "zz-while-out-zz", "zz-secret-zz", `"r2"`)
	epRequireList(t, "pull after re-adding: remove", epStrings(resp["scope_updates"].(map[string]any)["remove"]))
	conn := e.cbConnect(t, "u3", "c3", scope, c3)
	epRequireList(t, "connect with the cursor from before the removal: rebuild", epStrings(conn["rebuild"]), scope)
	// Still not after the re-assignment was seen (the epoch is stored, not recomputed).
	cbRequireRebuild(t, "pull again with the old cursor", e.cbPull(t, "u3", "c3", scope, c3), scope,
		"zz-while-out-zz", "zz-secret-zz", `"r2"`)

	// u1, a member throughout, resumes and sees r2 come and go.
	final := e.pullAll(t, "u1", "c1", 1000, r1)
	epRequireList(t, "u1's pull: rebuild", epStrings(final["rebuild"]))
	e.requireConverged(t, r1, scope)
	if _, ok := r1.rows[scope][rowKey("items", map[string]any{"id": "r2"})]; ok {
		t.Fatal("u1 still holds r2")
	}

	// A fresh rebuild gives u3 a cursor that resumes.
	r3 = newReplica()
	e.rebuildScope(t, "u3", "c3", scope, 1000, r3)
	e.d.Exec(t, `UPDATE app.items SET body = 'two, edited' WHERE id = 'i2'`)
	waitMaterialized(t, e.d)
	resp = e.cbPull(t, "u3", "c3", scope, r3.cursors[scope])
	epRequireList(t, "pull after the new rebuild: rebuild", epStrings(resp["rebuild"]))
	epRequireNoLeak(t, "pull after the new rebuild", mustMarshalBytes(t, resp), "zz-while-out-zz", "zz-secret-zz")
	r3.apply(t, resp)
	e.requireConverged(t, r3, scope)
	epRequireList(t, "connect after the new rebuild: rebuild", epStrings(e.cbConnect(t, "u3", "c3", scope, r3.cursors[scope])["rebuild"]))
}

// TestSyncCursorOfAnotherClient: a scope cursor or a rebuild session cursor
// only works for the client it was issued to. Another user's cursor for the
// same scope, and another client's of the same user, put the scope in rebuild
// (pull and connect) and deliver nothing, also a row that left the scope before
// the replaying user was added; another client's rebuild session cursor is a
// 400. The owner's cursors keep working.
func TestSyncCursorOfAnotherClient(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, cursorBindingSetup)
	const scope = "project:p"
	e.connect(t, "u1", "c1")
	e.connect(t, "u1", "c1b")
	r1 := newReplica()
	c1 := e.rebuildScope(t, "u1", "c1", scope, 1000, r1)["final_scope_cursor"]
	// Written before u4 joins: a row enters p and moves out.
	e.d.Exec(t, `INSERT INTO app.items VALUES ('r2', 'p', 'zz-before-u4-zz')`)
	e.d.Exec(t, `UPDATE app.items SET project_id = 'secret-proj', body = 'zz-secret-zz' WHERE id = 'r2'`)
	waitMaterialized(t, e.d)
	e.d.Exec(t, `INSERT INTO app.members VALUES ('p', 'u4')`)
	e.connect(t, "u3", "c3")
	e.connect(t, "u4", "c4")

	for _, x := range []struct{ user, client string }{{"u3", "c3"}, {"u4", "c4"}, {"u1", "c1b"}} {
		what := x.user + "/" + x.client + " with c1's cursor"
		cbRequireRebuild(t, "pull: "+what, e.cbPull(t, x.user, x.client, scope, c1), scope,
			"zz-before-u4-zz", "zz-secret-zz", `"r2"`)
		epRequireList(t, "connect: "+what, epStrings(e.cbConnect(t, x.user, x.client, scope, c1)["rebuild"]), scope)
	}

	// A rebuild session cursor of c1 is refused for another client, also of the same user.
	page := requireOK(t, "rebuild page", e.post(t, "u1", "/sync/rebuild",
		map[string]any{"client_id": "c1", "scope": scope, "cursor": nil, "limit": 1}))
	session, _ := page["cursor"].(string)
	if page["has_more"] != true || session == "" {
		t.Fatalf("first rebuild page: %v", page)
	}
	for _, x := range []struct{ user, client string }{{"u3", "c3"}, {"u1", "c1b"}} {
		r := e.post(t, x.user, "/sync/rebuild", map[string]any{"client_id": x.client, "scope": scope, "cursor": session, "limit": 1})
		epRequireError(t, x.client+" with c1's rebuild session", r, http.StatusBadRequest, "invalid_request", "zz-before-u4-zz")
	}
	next := requireOK(t, "c1 continues its session", e.post(t, "u1", "/sync/rebuild",
		map[string]any{"client_id": "c1", "scope": scope, "cursor": session, "limit": 1}))
	if len(next["records"].([]any)) != 1 {
		t.Fatalf("second page of c1's session: %v", next)
	}

	// The owner resumes with its cursor.
	resp := e.cbPull(t, "u1", "c1", scope, c1)
	epRequireList(t, "c1's own cursor: rebuild", epStrings(resp["rebuild"]))
	if n := len(resp["changes"].([]any)); n != 2 {
		t.Fatalf("c1's own cursor: %d changes, want r2's upsert and delete: %v", n, resp["changes"])
	}
	r1.apply(t, resp)
	e.requireConverged(t, r1, scope)
	epRequireList(t, "c1's own cursor in connect: rebuild", epStrings(e.cbConnect(t, "u1", "c1", scope, c1)["rebuild"]))
}

// TestSyncRebuildSessionAcrossReassignment: a rebuild session does not survive
// the scope leaving the client's set (seen by a pull) and coming back: the
// client restarts it, and a session continuously assigned pages to the end.
func TestSyncRebuildSessionAcrossReassignment(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, cursorBindingSetup)
	const scope = "project:p"
	e.connect(t, "u3", "c3")
	rebuildPage := func(cursor any) reply {
		return e.post(t, "u3", "/sync/rebuild", map[string]any{"client_id": "c3", "scope": scope, "cursor": cursor, "limit": 1})
	}
	session := requireOK(t, "first page", rebuildPage(nil))["cursor"]
	session = requireOK(t, "second page", rebuildPage(session))["cursor"]
	e.d.Exec(t, `DELETE FROM app.members WHERE project_id = 'p' AND user_id = 'u3'`)
	epRequireError(t, "rebuild of a removed scope", rebuildPage(session), http.StatusBadRequest, "invalid_request")
	resp := e.cbPull(t, "u3", "c3", scope, nil)
	epRequireList(t, "pull after leaving: remove", epStrings(resp["scope_updates"].(map[string]any)["remove"]), scope)
	e.d.Exec(t, `INSERT INTO app.members VALUES ('p', 'u3')`)
	epRequireError(t, "session from before the removal", rebuildPage(session), http.StatusBadRequest, "invalid_request")
	e.rebuildScope(t, "u3", "c3", scope, 1, newReplica())
}

// TestSyncCursorBindingMigration: migration 00015 gives clients registered
// before it an assignment epoch for every scope of their set; a cursor issued
// before it (no client or epoch in its payload) puts its scope in rebuild, and
// the cursor of a rebuild after it resumes.
func TestSyncCursorBindingMigration(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one')`)
	e.connect(t, "u1", "c1")
	migrateUpAgain(t, e.d, migrateDownTo(t, e.d, 14))
	// The worker's session fails while later migrations' columns are gone.
	waitReadiness(t, e.d)
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.client
		WHERE client_id = 'c1' AND ARRAY(SELECT jsonb_object_keys(scope_epoch) ORDER BY 1) = scope_set
		  AND (SELECT count(DISTINCT v) FROM jsonb_each_text(scope_epoch) x(k, v) WHERE v::bigint > 0) = 1`); n != 1 {
		t.Fatalf("c1's scope_epoch after the migration: %s", queryText(t, e.d, `SELECT scope_epoch::text FROM synchro.client`))
	}
	old := queryText(t, e.d, `SELECT synchro.sign_token('c', ARRAY[stream_generation::text, 'user:u1',
		materialized_commit_lsn::text, '2147483647', '2147483647']) FROM synchro.progress`)
	cbRequireRebuild(t, "pull with a cursor from before the migration", e.cbPull(t, "u1", "c1", "user:u1", old), "user:u1")
	epRequireList(t, "connect with a cursor from before the migration", epStrings(e.cbConnect(t, "u1", "c1", "user:u1", old)["rebuild"]), "user:u1")
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r)
	e.d.Exec(t, `UPDATE app.docs SET title = 'later' WHERE id = 'd1'`)
	waitMaterialized(t, e.d)
	resp := e.cbPull(t, "u1", "c1", "user:u1", r.cursors["user:u1"])
	if len(epStrings(resp["rebuild"])) != 0 || len(resp["changes"].([]any)) != 1 {
		t.Fatalf("pull after the migration and a rebuild: %v", resp)
	}
}
