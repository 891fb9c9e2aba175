package tests

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/client"
	"github.com/synchro-sync/synchro/internal/httpapi"
)

// HTTP conformance of the sync API outside the endpoints' own logic: answers
// to paths and methods no endpoint serves, exact field names in request
// bodies, the server's connection timeouts, and the form of the key a push
// answers with.

// hcRaw sends method path (body may be empty) as user with a client that does
// not follow redirects, and returns the answer as it came.
func (e *syncEnv) hcRaw(t *testing.T, method, user, path, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+token(t, user))
	}
	return send(t, req)
}

// TestSyncHTTPUnservedPathsAndMethods: a path no endpoint serves is 404
// not_found, and a method the endpoint of the path does not serve is 405
// method_not_allowed with an Allow header; both carry the protocol's error
// body (JSON, not retryable). A path that is not in canonical form
// (//sync/push, /sync/./push, a trailing slash) is a 404, never a redirect: a
// client follows a 301 of its POST with a GET. The Go SDK does not retry them.
func TestSyncHTTPUnservedPathsAndMethods(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	e.connect(t, "u1", "c1")
	push := `{"client_id":"c1","mutations":[]}`

	requireAnswer := func(t *testing.T, what string, status int, header http.Header, raw []byte, wantStatus int, code string) reply {
		t.Helper()
		r := reply{Status: status, Header: header, Raw: raw}
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			t.Fatalf("%s: answer %d is not a JSON object: %q (Location %q)", what, status, raw, header.Get("Location"))
		}
		epRequireError(t, what, r, wantStatus, code)
		return r
	}
	for _, c := range []struct {
		method, path, allow string
	}{
		{http.MethodGet, "/sync/push", "POST"},
		{http.MethodPut, "/sync/connect", "POST"},
		{http.MethodDelete, "/sync/pull", "POST"},
		{http.MethodGet, "/sync/rebuild", "POST"},
		{http.MethodPost, "/sync/schema", "GET"},
		{http.MethodPost, "/healthz", "GET"},
	} {
		for _, user := range []string{"u1", ""} {
			what := c.method + " " + c.path + " as " + user
			status, header, raw := e.hcRaw(t, c.method, user, c.path, push)
			requireAnswer(t, what, status, header, raw, http.StatusMethodNotAllowed, "method_not_allowed")
			if got := header.Get("Allow"); got != c.allow {
				t.Fatalf("%s: Allow %q, want %q", what, got, c.allow)
			}
		}
	}
	// HEAD: the same answer without a body.
	status, header, raw := e.hcRaw(t, http.MethodHead, "u1", "/sync/schema", "")
	if status != http.StatusMethodNotAllowed || header.Get("Allow") != "GET" || !strings.HasPrefix(header.Get("Content-Type"), "application/json") || len(raw) != 0 {
		t.Fatalf("HEAD /sync/schema: %d, Allow %q, Content-Type %q, body %q; want 405, GET, JSON, none",
			status, header.Get("Allow"), header.Get("Content-Type"), raw)
	}

	for _, path := range []string{"/sync/push/", "//sync/push", "/sync/./push", "/sync/%2E/push", "/sync//push",
		"/sync/x/../push", "/sync/PUSH", "/sync", "/nothing"} {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			status, header, raw := e.hcRaw(t, method, "u1", path, push)
			requireAnswer(t, method+" "+path, status, header, raw, http.StatusNotFound, "not_found")
			if loc := header.Get("Location"); loc != "" {
				t.Fatalf("%s %s: Location %q", method, path, loc)
			}
		}
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation`); n != 0 {
		t.Fatalf("%d mutations recorded by refused requests", n)
	}
	// The endpoints themselves still answer.
	requireOK(t, "POST /sync/push", e.post(t, "u1", "/sync/push", push))
	requireOK(t, "GET /sync/schema", e.epGet(t, "u1", "/sync/schema"))

	// The SDK takes not_found as final: one request, no retry.
	var requests atomic.Int32
	counting := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		requests.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	c, err := client.Open(context.Background(), filepath.Join(t.TempDir(), "c.sqlite"), client.Config{
		ServerURL: e.url + "/wrong-prefix", ClientID: "c2", HTTPClient: counting, MaxAttempts: 5, BackoffBase: time.Millisecond,
		Token: func(context.Context) (string, error) { return token(t, "u1"), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var syncErr *client.Error
	if err := c.Sync(context.Background()); !errors.As(err, &syncErr) || syncErr.Code != "not_found" || syncErr.Retryable || requests.Load() != 1 {
		t.Fatalf("SDK against a wrong path: %v after %d requests, want not_found, not retryable, after 1", err, requests.Load())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestSyncHTTPFieldNamesAreExact: encoding/json takes a member whose name
// differs from a field's only in case (with Unicode simple folding: "ſcope" is
// scope) for that field. A request with such a member, at any level, is 400
// invalid_request naming the real field and changes nothing; other unknown
// members are still ignored.
func TestSyncHTTPFieldNamesAreExact(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one')`)
	e.connect(t, "u1", "c1")
	version := queryText(t, e.d, `SELECT version FROM synchro.row_head WHERE key = 'd1'`)

	cases := []struct {
		path, body, field string
	}{
		{"/sync/push", `{"CLIENT_ID":"c1","Mutations":[]}`, "client_id"},
		{"/sync/push", `{"client_id":"c1","Mutations":[]}`, "mutations"},
		{"/sync/push", `{"client_id":"c1","mutations":[],"Client_Id":"c9"}`, "client_id"},
		{"/sync/push", `{"client_id":"c1","mutations":[{"mutation_id":"m1","table":"docs","op":"update","pk":{"id":"d1"},
			"Base_Version":"stale","columns":{"title":"overwritten"}}]}`, "mutations[0].base_version"},
		{"/sync/push", `{"client_id":"c1","mutations":[{"mutation_id":"m2","table":"docs","OP":"delete","op":"update","pk":{"id":"d1"},
			"columns":{"title":"x"}}]}`, "mutations[0].op"},
		{"/sync/push", `{"client_id":"c1","schema":{"HASH":"x"},"mutations":[]}`, "schema.hash"},
		{"/sync/connect", `{"client_id":"c1","protocol_version":3,"Known_Scopes":{}}`, "known_scopes"},
		{"/sync/connect", `{"client_id":"c1","protocol_version":3,"known_scopes":{"user:u1":{"CURSOR":null}}}`, "known_scopes[*].cursor"},
		{"/sync/pull", `{"client_id":"c1","scopes":{"user:u1":{"cursor":null}},"LIMIT":1}`, "limit"},
		{"/sync/rebuild", `{"client_id":"c1","ſcope":"user:u1","cursor":null}`, "scope"},
		{"/sync/rebuild", `{"client_id":"c1","scope":"user:u1","cursor":null,"limit":1,"Scope":"templates_public"}`, "scope"},
	}
	for _, c := range cases {
		r := e.post(t, "u1", c.path, c.body)
		epRequireError(t, c.path+" "+c.body, r, http.StatusBadRequest, "invalid_request", "stale", "overwritten", "c9")
		if msg := r.Body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, c.field+" only in case") {
			t.Fatalf("%s %s: message %q does not name %s", c.path, c.body, msg, c.field)
		}
	}
	if got := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); got != "one" {
		t.Fatalf("a refused push wrote: title %q", got)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation`); n != 0 {
		t.Fatalf("%d mutations recorded by refused pushes", n)
	}

	// Unknown members, and map keys (pk, columns, scopes) of any case, are as before.
	r := requireOK(t, "push with unknown members", e.post(t, "u1", "/sync/push", `{"client_id":"c1","extra":1,"mutations":[
		{"mutation_id":"m3","table":"docs","op":"update","pk":{"id":"d1"},"base_version":"`+version+`","columns":{"title":"two"},"note":"x"}]}`))
	if list, o := outcome(t, r, "m3"); list != "accepted" {
		t.Fatalf("m3: %s %v, want applied", list, o)
	}
	r = requireOK(t, "push with a key of another case", e.post(t, "u1", "/sync/push",
		`{"client_id":"c1","mutations":[{"mutation_id":"m4","table":"docs","op":"update","pk":{"ID":"d1"},"columns":{"title":"three"}}]}`))
	if list, o := outcome(t, r, "m4"); list != "rejected" || o["code"] != "validation_failed" {
		t.Fatalf("m4 (pk {\"ID\": ...}): %s %v, want validation_failed", list, o)
	}
	requireOK(t, "pull with unknown members", e.post(t, "u1", "/sync/pull", `{"client_id":"c1","scopes":{"USER:U1":{"cursor":null}},"future":{}}`))
}

// TestSyncHTTPServerTimeouts: the server synchrod runs closes a connection
// whose request headers take too long (slowloris) and a keep-alive connection
// left idle, instead of holding either for good.
func TestSyncHTTPServerTimeouts(t *testing.T) {
	srv := httpapi.NewServer(http.NotFoundHandler(), httpapi.DefaultServerConfig)
	if d := srv.ReadHeaderTimeout; d <= 0 || d > time.Minute {
		t.Fatalf("ReadHeaderTimeout %v, want set, at most a minute", d)
	}
	if d := srv.IdleTimeout; d <= 0 || d > 10*time.Minute {
		t.Fatalf("IdleTimeout %v, want set, at most ten minutes", d)
	}
	if srv.Handler == nil {
		t.Fatal("no handler")
	}
}

// TestSyncHTTPPushAnswersCanonicalKey: a push outcome that carries the row
// answers its pk in the form pull delivers the row under (a uuid in lower
// case with hyphens, whatever case and form it was sent in; an integer key
// stays a number), so a client keyed on pk keeps one copy of the row; an
// outcome without a row echoes the pk as sent.
func TestSyncHTTPPushAnswersCanonicalKey(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `CREATE TABLE app.things (id uuid PRIMARY KEY, owner_id text NOT NULL, title text);
		SELECT synchro.register_table('app.things', '{"kind":"column","template":"user:{owner_id}"}');
		CREATE TABLE app.counters (id integer PRIMARY KEY, owner_id text NOT NULL);
		SELECT synchro.register_table('app.counters', '{"kind":"column","template":"user:{owner_id}"}');`)
	e.connect(t, "u1", "c1")
	const canonical = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"

	resp := e.push(t, "u1", "c1",
		mut("m1", "things", "insert", map[string]any{"id": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}, map[string]any{"owner_id": "u1", "title": "one"}),
		mut("m2", "counters", "insert", map[string]any{"id": 7}, map[string]any{"owner_id": "u1"}),
		mut("m3", "things", "update", map[string]any{"id": "A0EEBC999C0B4EF8BB6D6BB9BD380A11"}, map[string]any{"title": "two"}),
		mut("m4", "things", "insert", map[string]any{"id": "{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}"}, map[string]any{"owner_id": "u1"}),
		mut("m5", "things", "update", map[string]any{"id": "B0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}, map[string]any{"title": "x"}),
	)
	pkOf := func(id string) string {
		_, o := outcome(t, resp, id)
		return mustMarshal(t, o["pk"])
	}
	for id, want := range map[string]string{
		"m1": `{"id":"` + canonical + `"}`,                    // applied
		"m2": `{"id":7}`,                                      // applied
		"m3": `{"id":"` + canonical + `"}`,                    // applied
		"m4": `{"id":"` + canonical + `"}`,                    // version_conflict with the existing row
		"m5": `{"id":"B0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}`, // version_conflict, no row: as sent
	} {
		if got := pkOf(id); got != want {
			t.Fatalf("%s: pk %s, want %s: %v", id, got, want, resp)
		}
	}
	if list, o := outcome(t, resp, "m4"); list != "rejected" || o["code"] != "version_conflict" {
		t.Fatalf("m4: %s %v, want version_conflict", list, o)
	}

	// The pk pull delivers is the one the push answered.
	waitMaterialized(t, e.d)
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 10, r)
	for _, want := range []string{rowKey("things", map[string]any{"id": canonical}), rowKey("counters", map[string]any{"id": 7})} {
		if _, ok := r.rows["user:u1"][want]; !ok {
			t.Fatalf("the rebuild does not deliver %s: %v", want, r.rows["user:u1"])
		}
	}
	// A replay answers the recorded outcome in the same form.
	again := e.push(t, "u1", "c1", mut("m1", "things", "insert", map[string]any{"id": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}, map[string]any{"owner_id": "u1", "title": "one"}))
	if _, o := outcome(t, again, "m1"); mustMarshal(t, o["pk"]) != `{"id":"`+canonical+`"}` {
		t.Fatalf("replayed m1: pk %v", o["pk"])
	}
}
