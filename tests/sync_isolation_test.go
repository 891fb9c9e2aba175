package tests

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// Isolation between users, cursor integrity and push idempotency over HTTP,
// and what the service role of the HTTP pool may do in the database.

// isoSecrets are values of u2's rows that no answer to u1 may contain.
var isoSecrets = []string{"zz-bravo-secret-zz", "zz-bravo-later-zz", "zz-task-secret-zz", "zz-note-secret-zz"}

// isoNoChangesOf fails when a pull page serves a change of scope, or a cursor
// or checksum for it.
func isoNoChangesOf(t *testing.T, what string, page map[string]any, scope string) {
	t.Helper()
	for _, it := range page["changes"].([]any) {
		if c := it.(map[string]any); c["scope"] == scope {
			t.Fatalf("%s: a change of %s was served: %v", what, scope, c)
		}
	}
	if _, ok := page["scope_cursors"].(map[string]any)[scope]; ok {
		t.Fatalf("%s: a cursor of %s was issued: %v", what, scope, page["scope_cursors"])
	}
	if cs, _ := page["checksums"].(map[string]any); cs != nil {
		if _, ok := cs[scope]; ok {
			t.Fatalf("%s: a checksum of %s was served", what, scope)
		}
	}
}

// TestSyncIsolationBetweenUsers: user u1 cannot pull u2's scope even with u2's
// real cursor (it is answered in scope_updates.remove and nothing of it is
// served), cannot rebuild it (400, also with u2's session cursor), cannot write
// u2's rows in any way nor read them through push answers (policy_rejected, or
// answered as a missing row; nothing changed, no row in the answer), and cannot
// use u2's client_id (409).
func TestSyncIsolationBetweenUsers(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('a1', 'u1', 'alpha'), ('b1', 'u2', 'zz-bravo-secret-zz');
		INSERT INTO app.projects VALUES ('pa', 'u1'), ('pb', 'u2');
		INSERT INTO app.tasks VALUES (1, 'pb', 'zz-task-secret-zz'), (2, 'pa', 'mine');
		INSERT INTO app.notes VALUES ('nb', 'zz-note-secret-zz');
		INSERT INTO app.note_members (note_id, user_id) VALUES ('nb', 'u2')`)
	e.connect(t, "u1", "ca")
	e.connect(t, "u2", "cb")
	rb := newReplica()
	e.rebuildScope(t, "u2", "cb", "user:u2", 100, rb)
	if len(rb.rows["user:u2"]) != 3 {
		t.Fatalf("u2's scope holds %d rows, want 3", len(rb.rows["user:u2"]))
	}
	curB := rb.cursors["user:u2"]
	e.d.Exec(t, `UPDATE app.docs SET title = 'zz-bravo-later-zz' WHERE id = 'b1'`)
	waitMaterialized(t, e.d)
	// Control: u2's cursor does serve the change to u2.
	own := requireOK(t, "u2's pull", e.post(t, "u2", "/sync/pull", map[string]any{"client_id": "cb",
		"scopes": map[string]any{"user:u2": map[string]any{"cursor": curB}}}))
	if len(own["changes"].([]any)) == 0 {
		t.Fatal("u2's cursor serves no change: the test would prove nothing")
	}
	dump := func() string {
		return strings.Join(rowsOf(t, e.d, `SELECT concat_ws('|', 'doc', id, owner_id, title) FROM app.docs
			UNION ALL SELECT concat_ws('|', 'task', id, project_id, title) FROM app.tasks
			UNION ALL SELECT concat_ws('|', 'note', id, title) FROM app.notes
			UNION ALL SELECT concat_ws('|', 'member', note_id, user_id) FROM app.note_members ORDER BY 1`), ",")
	}
	before := dump()

	t.Run("pull", func(t *testing.T) {
		for _, cursor := range []any{curB, nil, "garbage"} {
			r := e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "ca",
				"scopes": map[string]any{"user:u2": map[string]any{"cursor": cursor}, "user:u1": map[string]any{"cursor": nil}}})
			page := requireOK(t, "u1 pulls user:u2", r)
			epRequireList(t, "scope_updates.remove", epStrings(page["scope_updates"].(map[string]any)["remove"]), "user:u2")
			epRequireList(t, "rebuild", epStrings(page["rebuild"]), "user:u1")
			isoNoChangesOf(t, "u1 pulls user:u2", page, "user:u2")
			epRequireNoLeak(t, "u1 pulls user:u2", r.Raw, isoSecrets...)
		}
		// With a valid own cursor too, and all on one page.
		ra := newReplica()
		e.rebuildScope(t, "u1", "ca", "user:u1", 100, ra)
		r := e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "ca", "limit": 1000,
			"scopes": map[string]any{"user:u2": map[string]any{"cursor": curB}, "user:u1": map[string]any{"cursor": ra.cursors["user:u1"]}}})
		page := requireOK(t, "u1 pulls both", r)
		isoNoChangesOf(t, "u1 pulls both", page, "user:u2")
		epRequireNoLeak(t, "u1 pulls both", r.Raw, isoSecrets...)
		// Connect lists it as removed, not as a scope to rebuild.
		r = e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "ca", "protocol_version": 3,
			"known_scopes": map[string]any{"user:u2": map[string]any{"cursor": curB}}})
		conn := requireOK(t, "u1 connects knowing user:u2", r)
		epRequireList(t, "scopes.remove", epStrings(conn["scopes"].(map[string]any)["remove"]), "user:u2")
		epRequireList(t, "rebuild", epStrings(conn["rebuild"]))
		epRequireNoLeak(t, "u1 connects knowing user:u2", r.Raw, isoSecrets...)
	})

	t.Run("rebuild", func(t *testing.T) {
		first := requireOK(t, "u2 rebuild page", e.post(t, "u2", "/sync/rebuild", map[string]any{"client_id": "cb", "scope": "user:u2", "limit": 1}))
		session := first["cursor"]
		for _, cursor := range []any{nil, session} {
			r := e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "ca", "scope": "user:u2", "cursor": cursor})
			epRequireError(t, "u1 rebuilds user:u2", r, http.StatusBadRequest, "invalid_request", isoSecrets...)
		}
		// u2's session cursor is not valid for u1's own scope either.
		r := e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "ca", "scope": "user:u1", "cursor": session})
		epRequireError(t, "u2's session cursor for user:u1", r, http.StatusBadRequest, "invalid_request", isoSecrets...)
	})

	t.Run("push", func(t *testing.T) {
		version := rowVersion(t, e.d, "app.docs", "b1")
		stale := func(m map[string]any, base string) map[string]any { m["base_version"] = base; return m }
		muts := []map[string]any{
			mut("i1", "docs", "update", map[string]any{"id": "b1"}, map[string]any{"title": "hijacked"}),
			stale(mut("i2", "docs", "update", map[string]any{"id": "b1"}, map[string]any{"title": "hijacked"}), version),
			stale(mut("i3", "docs", "update", map[string]any{"id": "b1"}, map[string]any{"title": "hijacked"}), "stale-version"),
			mut("i4", "docs", "delete", map[string]any{"id": "b1"}, nil),
			stale(mut("i5", "docs", "delete", map[string]any{"id": "b1"}, nil), "stale-version"),
			mut("i6", "docs", "upsert", map[string]any{"id": "b1"}, map[string]any{"owner_id": "u1"}),
			mut("i7", "docs", "insert", map[string]any{"id": "b1"}, map[string]any{"owner_id": "u1", "title": "mine now"}),
			mut("i8", "docs", "insert", map[string]any{"id": "b2"}, map[string]any{"owner_id": "u2", "title": "planted"}),
			mut("i9", "docs", "update", map[string]any{"id": "a1"}, map[string]any{"owner_id": "u2"}),
			mut("i10", "tasks", "update", map[string]any{"id": 1}, map[string]any{"title": "hijacked"}),
			mut("i11", "tasks", "update", map[string]any{"id": 1}, map[string]any{"project_id": "pa"}),
			mut("i12", "tasks", "insert", map[string]any{"id": 1}, map[string]any{"project_id": "pa", "title": "dup"}),
			mut("i13", "tasks", "insert", map[string]any{"id": 3}, map[string]any{"project_id": "pb", "title": "planted"}),
			mut("i14", "tasks", "update", map[string]any{"id": 2}, map[string]any{"project_id": "pb"}),
			mut("i15", "notes", "update", map[string]any{"id": "nb"}, map[string]any{"title": "hijacked"}),
			mut("i16", "notes", "delete", map[string]any{"id": "nb"}, nil),
			mut("i17", "notes", "insert", map[string]any{"id": "nb"}, map[string]any{"title": "dup"}),
		}
		r := e.post(t, "u1", "/sync/push", map[string]any{"client_id": "ca", "mutations": muts})
		resp := requireOK(t, "u1 pushes into u2's rows", r)
		for _, m := range muts {
			id := m["mutation_id"].(string)
			list, o := outcome(t, resp, id)
			// An update or delete of u2's row is answered as one of a missing
			// row (TestSyncPushKeyProbing); an insert or a write into u2's
			// scopes is refused.
			want := "policy_rejected"
			if op := m["op"]; (op == "update" || op == "delete") && id != "i9" && id != "i14" {
				want = "version_conflict"
			}
			if list != "rejected" || o["code"] != want {
				t.Errorf("mutation %s (%s %s %v): %s %v, want %s", id, m["op"], m["table"], m["pk"], list, o, want)
			}
			if o["server_row"] != nil || o["server_version"] != nil {
				t.Errorf("mutation %s: the answer carries u2's row: %v", id, o)
			}
		}
		epRequireNoLeak(t, "u1 pushes into u2's rows", r.Raw, append(isoSecrets, version)...)
		if after := dump(); after != before {
			t.Fatalf("u1's push changed u2's data:\n%s\n->\n%s", before, after)
		}
	})

	t.Run("client_id", func(t *testing.T) {
		for _, path := range []string{"/sync/connect", "/sync/push", "/sync/pull", "/sync/rebuild"} {
			r := e.post(t, "u1", path, map[string]any{"client_id": "cb", "protocol_version": 3, "scope": "user:u2",
				"scopes":    map[string]any{"user:u2": map[string]any{"cursor": curB}},
				"mutations": []any{mut("c1", "docs", "update", map[string]any{"id": "b1"}, map[string]any{"title": "hijacked"})}})
			epRequireError(t, "u1 uses u2's client_id on "+path, r, http.StatusConflict, "client_conflict", isoSecrets...)
		}
		if after := dump(); after != before {
			t.Fatal("a request with u2's client_id wrote")
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation WHERE client_id = 'cb'`); n != 0 {
			t.Fatalf("%d mutations recorded for u2's client", n)
		}
	})
}

// TestSyncIsolationCursors: a scope cursor edited in any byte, truncated or
// extended, a cursor of another scope or kind, one signed for another stream
// generation or past the high-watermark, is never resumed: pull lists the scope
// in rebuild and serves none of its changes, connect lists it in rebuild; never
// a 500.
func TestSyncIsolationCursors(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one'), ('d2', 'u1', 'two');
		INSERT INTO app.templates VALUES (1, 'welcome')`)
	e.connect(t, "u1", "c1")
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r)
	e.rebuildScope(t, "u1", "c1", "templates_public", 100, r)
	cur := r.cursors["user:u1"].(string)
	tpl := r.cursors["templates_public"].(string)
	session := requireOK(t, "rebuild page", e.post(t, "u1", "/sync/rebuild",
		map[string]any{"client_id": "c1", "scope": "user:u1", "limit": 1}))["cursor"].(string)
	e.d.Exec(t, `UPDATE app.docs SET title = 'later' WHERE id = 'd1'; INSERT INTO app.templates VALUES (2, 'later')`)
	waitMaterialized(t, e.d)

	pull := func(t *testing.T, what string, scope string, cursor any) map[string]any {
		t.Helper()
		resp := e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "scopes": map[string]any{scope: map[string]any{"cursor": cursor}}})
		return requireOK(t, what, resp)
	}
	// Control: the real cursors serve the changes.
	for scope, c := range map[string]string{"user:u1": cur, "templates_public": tpl} {
		if page := pull(t, "control", scope, c); len(page["changes"].([]any)) == 0 || len(epStrings(page["rebuild"])) != 0 {
			t.Fatalf("the real cursor of %s serves no change: %v", scope, page)
		}
	}
	refused := func(t *testing.T, what, scope string, cursor any) {
		t.Helper()
		page := pull(t, what, scope, cursor)
		epRequireList(t, what+": rebuild", epStrings(page["rebuild"]), scope)
		if n := len(page["changes"].([]any)); n != 0 {
			t.Fatalf("%s: %d changes served: %v", what, n, page["changes"])
		}
		if len(page["scope_cursors"].(map[string]any)) != 0 {
			t.Fatalf("%s: cursors issued: %v", what, page["scope_cursors"])
		}
	}

	t.Run("every byte edited", func(t *testing.T) {
		for i := 0; i < len(cur); i++ {
			for _, b := range []byte{epFlip(cur[i]), '-', '_', '.', '='} {
				if b == cur[i] {
					continue
				}
				bad := []byte(cur)
				bad[i] = b
				refused(t, fmt.Sprintf("byte %d set to %q", i, b), "user:u1", string(bad))
			}
		}
	})

	t.Run("crafted cursors", func(t *testing.T) {
		gen := queryText(t, e.d, `SELECT stream_generation::text FROM synchro.progress`)
		epoch := queryText(t, e.d, `SELECT scope_epoch ->> 'user:u1' FROM synchro.client WHERE client_id = 'c1'`)
		bound := `"user:u1","c1","` + epoch + `"`
		// signed is the token expr computes with g the generation gen, k client c1 and p the progress row.
		signed := func(gen, expr string) string {
			return queryText(t, e.d, `SELECT `+expr+` FROM synchro.progress p, synchro.client k, LATERAL (SELECT `+gen+` AS g) x
				WHERE k.client_id = 'c1'`)
		}
		payload, sig, _ := strings.Cut(cur, ".")
		for name, c := range map[string]any{
			"null":                          nil,
			"empty":                         "",
			"truncated":                     cur[:len(cur)-1],
			"half":                          cur[:len(cur)/2],
			"extended":                      cur + "A",
			"doubled":                       cur + cur,
			"signature only":                "." + sig,
			"payload only":                  payload,
			"payload with empty signature":  payload + ".",
			"swapped parts":                 sig + "." + payload,
			"with padding":                  payload + "==." + sig,
			"whitespace":                    " " + cur,
			"newline":                       cur + "\n",
			"cursor of another scope":       tpl,
			"rebuild session cursor":        session,
			"another generation":            signed(`gen_random_uuid()`, `synchro.scope_cursor(g, k, 'user:u1', '0/0', 0, 0)`),
			"another generation at hw":      signed(`gen_random_uuid()`, `synchro.scope_cursor(g, k, 'user:u1', p.materialized_commit_lsn, 0, 0)`),
			"past the high-watermark":       signed(`p.stream_generation`, `synchro.scope_cursor(g, k, 'user:u1', 'FFFFFFFF/FFFFFFFF', 0, 0)`),
			"signed for another scope":      signed(`p.stream_generation`, `synchro.sign_token('c', ARRAY[g::text, 'user:u2', k.client_id, k.scope_epoch ->> 'user:u1', '0/0', '0', '0'])`),
			"signed for another client":     signed(`p.stream_generation`, `synchro.sign_token('c', ARRAY[g::text, 'user:u1', 'c2', k.scope_epoch ->> 'user:u1', '0/0', '0', '0'])`),
			"signed for an earlier epoch":   signed(`p.stream_generation`, `synchro.sign_token('c', ARRAY[g::text, 'user:u1', k.client_id, ((k.scope_epoch ->> 'user:u1')::bigint - 1)::text, '0/0', '0', '0'])`),
			"signed without the binding":    signed(`p.stream_generation`, `synchro.sign_token('c', ARRAY[g::text, 'user:u1', '0/0', '0', '0'])`),
			"unsigned payload":              isoB64(`["c","`+gen+`",`+bound+`,"0/0","0","0"]`) + "." + sig,
			"payload of another generation": isoB64(`["c","00000000-0000-0000-0000-000000000000",`+bound+`,"0/0","0","0"]`) + "." + sig,
			"payload not JSON":              isoB64(`not json`) + "." + sig,
			"payload an object":             isoB64(`{"c":1}`) + "." + sig,
			"payload a scalar":              isoB64(`7`) + "." + sig,
			"payload invalid UTF-8":         isoB64("\xff\xfe") + "." + sig,
			"payload with bad lsn":          isoB64(`["c","`+gen+`",`+bound+`,"zz","0","0"]`) + "." + sig,
			"non-ASCII":                     "é." + sig,
			"long":                          strings.Repeat("A", 4000) + "." + sig,
		} {
			refused(t, name, "user:u1", c)
		}
		// A scope cursor issued for another scope fails in both directions.
		refused(t, "user:u1's cursor for templates_public", "templates_public", cur)
		// In connect too.
		for name, c := range map[string]any{"edited": cur[:10] + string(epFlip(cur[10])) + cur[11:], "another scope": tpl, "session": session} {
			conn := requireOK(t, "connect", e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3,
				"known_scopes": map[string]any{"user:u1": map[string]any{"cursor": c}, "templates_public": map[string]any{"cursor": tpl}}}))
			epRequireList(t, "connect with a "+name+" cursor: rebuild", epStrings(conn["rebuild"]), "user:u1")
		}
		// The real cursor still works after all of that.
		if page := pull(t, "real cursor", "user:u1", cur); len(page["changes"].([]any)) == 0 {
			t.Fatal("the real cursor no longer serves its changes")
		}
	})
}

func isoB64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// isoWithoutTime is a push answer without its server_time, as canonical JSON.
func isoWithoutTime(t *testing.T, raw []byte) string {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("answer %q: %v", raw, err)
	}
	delete(v, "server_time")
	return mustMarshal(t, v)
}

// TestSyncIdempotency: a push sent again returns the recorded outcomes, equal
// to the first answer, and applies nothing again (one fence per applied
// mutation); another mutation sent under a recorded id is rejected; a
// mutation id twice in one push is a 400 that writes nothing; the same push
// sent concurrently by 8 requests applies once and every answer
// agrees, also when the requests carry the mutations in different orders.
func TestSyncIdempotency(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one'), ('d2', 'u2', 'theirs')`)
	e.connect(t, "u1", "c1")
	e.connect(t, "u1", "c2")
	var sub *testing.T // the running subtest
	fences := func(client, id string) int64 {
		return queryInt(sub, e.d, `SELECT count(*) FROM synchro.fence WHERE client_id = $1 AND mutation_id = $2`, client, id)
	}

	t.Run("sequential replay", func(t *testing.T) {
		sub = t
		body := map[string]any{"client_id": "c1", "batch_id": "b1", "mutations": []any{
			mut("m1", "docs", "insert", map[string]any{"id": "n1"}, map[string]any{"owner_id": "u1", "title": "new", "n": 1}),
			mut("m2", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "changed"}),
			mut("m3", "docs", "update", map[string]any{"id": "missing"}, map[string]any{"title": "x"}),
			mut("m4", "docs", "update", map[string]any{"id": "d2"}, map[string]any{"title": "x"}),
			mut("m5", "docs", "insert", map[string]any{"id": "n2"}, map[string]any{"owner_id": "u1", "n": -1}),
			mut("m6", "docs", "delete", map[string]any{"id": "n1"}, nil),
		}}
		first := requireOK(t, "push", e.post(t, "u1", "/sync/push", body))
		firstRaw := isoWithoutTime(t, e.post(t, "u1", "/sync/push", body).Raw)
		if want := isoWithoutTime(t, mustMarshalBytes(t, first)); firstRaw != want {
			t.Fatalf("replayed answer differs:\n%s\n%s", firstRaw, want)
		}
		for id, want := range map[string]int64{"m1": 1, "m2": 1, "m3": 0, "m4": 0, "m5": 0, "m6": 1} {
			if n := fences("c1", id); n != want {
				t.Fatalf("mutation %s has %d fences, want %d", id, n, want)
			}
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation WHERE client_id = 'c1'`); n != 6 {
			t.Fatalf("%d recorded mutations, want 6", n)
		}
		// Another mutation under a recorded id, alone or in another batch, is
		// refused and writes nothing; it does not get the recorded outcome, which
		// does not describe it.
		other := requireOK(t, "other contents", e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "batch_id": "b2", "mutations": []any{
			mut("m2", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "other"}),
			mut("m1", "docs", "insert", map[string]any{"id": "n1"}, map[string]any{"owner_id": "u1", "title": "again"}),
			mut("m6", "docs", "delete", map[string]any{"id": "n2"}, nil)}}))
		for _, id := range []string{"m1", "m2", "m6"} {
			list, o := outcome(t, other, id)
			if list != "rejected" || o["status"] != "rejected" || o["code"] != "validation_failed" ||
				!strings.Contains(fmt.Sprint(o["message"]), "mutation_id already names another mutation") {
				t.Fatalf("%s with other contents: %s %v", id, list, o)
			}
		}
		if got := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); got != "changed" {
			t.Fatalf("a mutation under a recorded id wrote: title %q", got)
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM app.docs WHERE id IN ('n1', 'n2')`); n != 0 {
			t.Fatalf("a mutation under a recorded id wrote: %d of the rows n1, n2", n)
		}
		if fences("c1", "m2") != 1 || fences("c1", "m1") != 1 || fences("c1", "m6") != 1 {
			t.Fatal("a mutation under a recorded id created a fence")
		}
		// The same contents in another batch are a replay; an outcome recorded
		// before digests existed replays whatever the contents.
		e.d.Exec(t, `UPDATE synchro.mutation SET digest = NULL WHERE client_id = 'c1' AND mutation_id = 'm1'`)
		replay := requireOK(t, "replay", e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "batch_id": "b3", "mutations": []any{
			mut("m2", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "changed"}),
			mut("m1", "docs", "insert", map[string]any{"id": "n1"}, map[string]any{"owner_id": "u1", "title": "again"})}}))
		for _, id := range []string{"m1", "m2"} {
			_, o := outcome(t, replay, id)
			_, f := outcome(t, first, id)
			if mustMarshal(t, o) != mustMarshal(t, f) {
				t.Fatalf("replay of %s: %v, recorded %v", id, o, f)
			}
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM app.docs WHERE id = 'n1'`); n != 0 {
			t.Fatal("a replayed insert wrote the deleted row again")
		}
		// The same mutation id of another client is another mutation.
		o := requireOK(t, "other client", e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c2", "mutations": []any{
			mut("m2", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "by c2"})}}))
		if list, oc := outcome(t, o, "m2"); list != "accepted" || oc["status"] != "applied" {
			t.Fatalf("c2's m2: %s %v", list, oc)
		}
		if fences("c2", "m2") != 1 {
			t.Fatal("c2's m2 has no fence")
		}
		// A mutation id twice in one push is a malformed request: the second
		// mutation would only replay the first one's outcome, never be applied.
		r := e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": []any{
			mut("m7", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "seven"}),
			mut("m7", "docs", "insert", map[string]any{"id": "n7"}, map[string]any{"owner_id": "u1", "title": "seven again"})}})
		requireError(t, "the same mutation id twice in one push", r, 400, "invalid_request")
		if fences("c1", "m7") != 0 {
			t.Fatal("the refused push wrote")
		}
		requireOK(t, "m7 alone", e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": []any{
			mut("m7", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "seven"})}}))
		if got := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); got != "seven" {
			t.Fatalf("title %q", got)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		sub = t
		const n = 8
		tok := token(t, "u1")
		muts := []map[string]any{
			mut("k1", "docs", "insert", map[string]any{"id": "k"}, map[string]any{"owner_id": "u1", "title": "conc"}),
			mut("k2", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "conc"}),
			mut("k3", "docs", "update", map[string]any{"id": "d2"}, map[string]any{"title": "conc"}),
		}
		for _, orders := range []string{"same order", "mixed orders"} {
			prefix := "k"
			if orders == "mixed orders" {
				// Other mutation ids, and the row k is inserted anew.
				prefix = "r"
				for _, m := range muts {
					m["mutation_id"] = "r" + m["mutation_id"].(string)[1:]
				}
				e.d.Exec(t, `DELETE FROM app.docs WHERE id = 'k'`)
			}
			reversed := []map[string]any{muts[2], muts[1], muts[0]}
			answers := make([]string, n)
			statuses := make([]int, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				list := muts
				if orders == "mixed orders" && i%2 == 1 {
					list = reversed
				}
				body := mustMarshal(t, map[string]any{"client_id": "c1", "mutations": list})
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					statuses[i], answers[i], errs[i] = isoPost(e.url+"/sync/push", tok, body)
				}(i)
			}
			wg.Wait()
			// A replay after the concurrent round answers the recorded outcomes;
			// every concurrent answer agrees with them. In mixed orders a request
			// may have had to give up waiting (deadlock): server_retryable, not
			// recorded; a replay resolves it.
			replay := requireOK(t, "replay", e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": muts}))
			outcomes := map[string]string{}
			for _, m := range muts {
				id := m["mutation_id"].(string)
				list, o := outcome(t, replay, id)
				if o["code"] == "server_retryable" {
					t.Fatalf("%s: the sequential replay of %s is retryable: %v", orders, id, o)
				}
				outcomes[id] = list + " " + mustMarshal(t, o)
			}
			retried := 0
			for i := 0; i < n; i++ {
				if errs[i] != nil || statuses[i] != http.StatusOK {
					t.Fatalf("%s: request %d: %d %s %v", orders, i, statuses[i], answers[i], errs[i])
				}
				var resp map[string]any
				if err := json.Unmarshal([]byte(answers[i]), &resp); err != nil {
					t.Fatal(err)
				}
				for _, m := range muts {
					id := m["mutation_id"].(string)
					list, o := outcome(t, resp, id)
					if o["code"] == "server_retryable" && orders == "mixed orders" {
						retried++
						continue
					}
					if got := list + " " + mustMarshal(t, o); got != outcomes[id] {
						t.Fatalf("%s: request %d disagrees on %s:\n%s\nrecorded:\n%s", orders, i, id, got, outcomes[id])
					}
				}
			}
			t.Logf("%s: %d outcomes were server_retryable", orders, retried)
			id := func(k string) string { return prefix + k }
			for _, k := range []string{"1", "2"} {
				if !strings.HasPrefix(outcomes[id(k)], "accepted ") {
					t.Fatalf("%s: mutation %s: %s", orders, id(k), outcomes[id(k)])
				}
				if f := fences("c1", id(k)); f != 1 {
					t.Fatalf("%s: mutation %s has %d fences", orders, id(k), f)
				}
			}
			// u2's row: answered as a missing one (TestSyncPushKeyProbing).
			if !strings.Contains(outcomes[id("3")], "the row does not exist") {
				t.Fatalf("%s: mutation %s: %s", orders, id("3"), outcomes[id("3")])
			}
			if c := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation WHERE client_id = 'c1' AND mutation_id = ANY ($1)`,
				[]string{id("1"), id("2"), id("3")}); c != 3 {
				t.Fatalf("%s: %d recorded mutations, want 3", orders, c)
			}
		}
	})
}

// isoPost posts body with a bearer token without the testing helpers (safe in
// goroutines): status, raw answer and transport error.
func isoPost(url, tok, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), err
}

// TestSyncServiceRolePrivileges: the HTTP pool's role (synchro_service) can
// call the sync entry points, and nothing else: no operator or registration
// function, no token signing (it could forge cursors), no internal function
// that skips the entry points' checks, no synchro table, no application table.
func TestSyncServiceRolePrivileges(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, syncSchema)
	for _, sql := range []string{
		`SELECT synchro.retry_poison(1)`,
		`SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}')`,
		`SELECT synchro.register_shared_scope('evil')`,
		`SELECT synchro.set_scope_assignment(NULL)`,
		`SELECT synchro.set_write_policy('app.docs', NULL)`,
		`SELECT synchro.configure_protocol(1, NULL)`,
		`SELECT synchro.configure_readiness('1 hour', 1, '1 hour', current_database())`,
		`SELECT * FROM synchro.client`,
		`SELECT * FROM synchro.cursor_key`,
		`SELECT * FROM synchro.mutation`,
		`SELECT * FROM synchro.fence`,
		`SELECT * FROM synchro.settings`,
		`SELECT * FROM synchro.poison`,
		`UPDATE synchro.client SET user_id = 'evil'`,
		`DELETE FROM synchro.mutation`,
		`SELECT synchro.sign_token('c', ARRAY['x'])`,
		`SELECT synchro.read_token('c', 'x.y')`,
		`SELECT synchro.scope_cursor(gen_random_uuid(), NULL::synchro.client, 'user:u1', '0/0', 0, 0)`,
		`SELECT synchro.scope_token('c', gen_random_uuid(), NULL::synchro.client, 'user:u1', ARRAY['x'])`,
		`SELECT synchro.read_scope_token('c', 'x.y', gen_random_uuid(), NULL::synchro.client, 'user:u1')`,
		`SELECT synchro.client_session('u1', '{"client_id":"x"}', true)`,
		`SELECT synchro.assigned_scopes('u1')`,
		`SELECT synchro.capture_gate('x')`,
		`SELECT * FROM synchro.live_rows(1, NULL, NULL)`,
		`SELECT synchro.materializable_scopes(NULL::synchro.synced_table, 'x', NULL, NULL)`,
		`SELECT synchro.refuse(400, 'invalid_request', 'x')`,
		`SELECT * FROM app.docs`,
		`INSERT INTO app.docs (id, owner_id) VALUES ('x', 'u1')`,
	} {
		if err := asRole(t, d, "synchro_service", sql); sqlState(err) != "42501" {
			t.Errorf("the service role ran %q: %v", sql, err)
		}
	}
	// The entry points are callable.
	for _, sql := range []string{
		`SELECT synchro.sync_schema()`,
		`SELECT synchro.connect('u1', '{"client_id":"c1","protocol_version":3}')`,
		`SELECT synchro.is_ready()`,
	} {
		if err := asRole(t, d, "synchro_service", sql); err != nil {
			t.Errorf("the service role cannot run %q: %v", sql, err)
		}
	}
}
