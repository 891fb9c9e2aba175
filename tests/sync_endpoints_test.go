package tests

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// Black-box tests of the sync endpoints (docs/protocol.md): every request
// error code, every push rejection code, connect's schema negotiation and scope
// diff, scope assignment, the capture gate, gzip, and that error answers leak
// neither SQL nor submitted values.

// epServer serves the sync API of e's database on a further HTTP server whose
// Sync is tuned (limits, waits); the worker and database are shared with e.
func (e *syncEnv) epServer(t *testing.T, tune ...func(*httpapi.Sync)) *syncEnv {
	t.Helper()
	return &syncEnv{d: e.d, cfg: e.cfg, w: e.w, url: serveSync(t, e.d, tune...)}
}

// epPostAuth posts body (as e.post does) with the Authorization header value
// authz ("" = none).
func (e *syncEnv) epPostAuth(t *testing.T, authz, path string, body any) reply {
	t.Helper()
	raw, ok := body.(string)
	if !ok {
		raw = mustMarshal(t, body)
	}
	req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	return do(t, req)
}

// epPostNumbers posts body (a JSON text) as user like e.post, decoding the
// answer with json.Number: an answer may echo a client's number beyond float64
// (a pk of 1e400), which e.post cannot decode.
func (e *syncEnv) epPostNumbers(t *testing.T, user, path, body string) reply {
	t.Helper()
	status, header, raw := fuzzPost(t, e.url+path, token(t, user), []byte(body))
	r := reply{Status: status, Header: header, Raw: raw}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&r.Body); err != nil || r.Body == nil {
		t.Fatalf("POST %s: answer %d is not a JSON object: %q", path, status, raw)
	}
	return r
}

// epGet sends GET path as user ("" = no Authorization header).
func (e *syncEnv) epGet(t *testing.T, user, path string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+token(t, user))
	}
	return do(t, req)
}

// epLeaks are strings that only SQL text, server internals or schema names put
// into an answer.
var epLeaks = []string{"SELECT", "select ", "INSERT INTO", "DELETE FROM", "synchro.", "pg_", "SQLSTATE", "PL/pgSQL",
	"plpgsql", "app.", "relation \"", "function ", "panic", "goroutine"}

// epRequireNoLeak fails when raw holds SQL text, server internals or any of the
// values the request submitted.
func epRequireNoLeak(t *testing.T, what string, raw []byte, values ...string) {
	t.Helper()
	for _, s := range append(slices.Clone(epLeaks), values...) {
		if s != "" && bytes.Contains(raw, []byte(s)) {
			t.Fatalf("%s: the answer contains %q: %s", what, s, raw)
		}
	}
}

// epRequireError fails unless r is the error answer status/code with the
// protocol's error body: JSON, the retryable flag of the code, a message, and
// no SQL text or submitted values (values) in it.
func epRequireError(t *testing.T, what string, r reply, status int, code string, values ...string) {
	t.Helper()
	requireError(t, what, r, status, code)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: Content-Type %q", what, ct)
	}
	e := r.Body["error"].(map[string]any)
	wantRetry := code == "capture_pending" || code == "not_ready" || code == "retry_later" || code == "internal"
	if e["retryable"] != wantRetry {
		t.Fatalf("%s: retryable %v, want %v: %s", what, e["retryable"], wantRetry, r.Raw)
	}
	if msg, _ := e["message"].(string); msg == "" {
		t.Fatalf("%s: no message: %s", what, r.Raw)
	}
	if wantRetry != (r.Header.Get("Retry-After") != "") && code != "internal" {
		t.Fatalf("%s: Retry-After %q for code %s", what, r.Header.Get("Retry-After"), code)
	}
	epRequireNoLeak(t, what, r.Raw, values...)
}

// epStrings is a JSON array of strings as []string (nil for a missing array).
func epStrings(v any) []string {
	var out []string
	items, _ := v.([]any)
	for _, it := range items {
		out = append(out, fmt.Sprint(it))
	}
	return out
}

// epAddIDs is the ids of a scopes.add / scope_updates.add list, failing unless
// every cursor in it is null.
func epAddIDs(t *testing.T, v any) []string {
	t.Helper()
	var out []string
	items, _ := v.([]any)
	for _, it := range items {
		a := it.(map[string]any)
		if c, ok := a["cursor"]; !ok || c != nil {
			t.Fatalf("added scope %v: cursor must be present and null", a)
		}
		out = append(out, a["id"].(string))
	}
	return out
}

func epRequireList(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s: %q, want %q", what, got, want)
	}
}

// epDepth is a JSON value nested depth arrays deep.
func epDepth(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// TestSyncEndpointRequestErrors: every request-level error of every endpoint:
// 400 invalid_request for malformed, mistyped, over-limit and out-of-place
// requests, 401 auth_required, 409 client_conflict, 413 request_too_large and
// 422 schema_mismatch; each answer is the protocol's error body with no SQL and
// none of the submitted values, and a refused request changes nothing.
func TestSyncEndpointRequestErrors(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one'), ('d2', 'u1', 'two'), ('b1', 'u2', 'bee')`)
	e.connect(t, "u1", "c1")
	e.connect(t, "u2", "cb")

	t.Run("invalid_request", func(t *testing.T) {
		okMut := `{"mutation_id":"m1","table":"docs","op":"update","pk":{"id":"d1"},"columns":{"title":"x"}}`
		pushWith := func(m string) string { return `{"client_id":"c1","mutations":[` + m + `]}` }
		cases := []struct {
			name, path, body string
		}{
			{"empty body", "/sync/connect", ``},
			{"whitespace body", "/sync/pull", "  \n"},
			{"malformed JSON", "/sync/connect", `{"client_id": "c1",`},
			{"malformed JSON push", "/sync/push", `{"client_id":"c1","mutations":[{]}`},
			{"unquoted key", "/sync/pull", `{client_id:"c1"}`},
			{"array body", "/sync/connect", `[]`},
			{"null body", "/sync/push", `null`},
			{"string body", "/sync/pull", `"c1"`},
			{"number body", "/sync/rebuild", `42`},
			{"client_id number", "/sync/connect", `{"client_id":5,"protocol_version":3}`},
			{"client_id object", "/sync/pull", `{"client_id":{"id":"c1"}}`},
			{"client_id missing", "/sync/pull", `{}`},
			{"client_id empty", "/sync/push", `{"client_id":"","mutations":[]}`},
			{"client_id too long", "/sync/connect", `{"client_id":"` + strings.Repeat("c", 257) + `","protocol_version":3}`},
			{"protocol_version missing", "/sync/connect", `{"client_id":"c1"}`},
			{"protocol_version string", "/sync/connect", `{"client_id":"c1","protocol_version":"3"}`},
			{"protocol_version fraction", "/sync/connect", `{"client_id":"c1","protocol_version":3.5}`},
			{"protocol_version huge", "/sync/connect", `{"client_id":"c1","protocol_version":1e400}`},
			{"known_scopes array", "/sync/connect", `{"client_id":"c1","protocol_version":3,"known_scopes":[]}`},
			{"known cursor number", "/sync/connect", `{"client_id":"c1","protocol_version":3,"known_scopes":{"user:u1":{"cursor":7}}}`},
			{"schema string", "/sync/connect", `{"client_id":"c1","protocol_version":3,"schema":"abc"}`},
			{"schema version string", "/sync/pull", `{"client_id":"c1","schema":{"version":"7"}}`},
			{"scope_set_version string", "/sync/pull", `{"client_id":"c1","scope_set_version":"2"}`},
			{"limit string", "/sync/pull", `{"client_id":"c1","limit":"5"}`},
			{"limit fraction", "/sync/pull", `{"client_id":"c1","limit":2.5}`},
			{"limit zero", "/sync/pull", `{"client_id":"c1","limit":0}`},
			{"limit negative", "/sync/pull", `{"client_id":"c1","limit":-1}`},
			{"limit huge", "/sync/pull", `{"client_id":"c1","limit":1e30}`},
			{"rebuild limit zero", "/sync/rebuild", `{"client_id":"c1","scope":"user:u1","limit":0}`},
			{"rebuild limit negative", "/sync/rebuild", `{"client_id":"c1","scope":"user:u1","limit":-5}`},
			{"scopes array", "/sync/pull", `{"client_id":"c1","scopes":["user:u1"]}`},
			{"scope cursor number", "/sync/pull", `{"client_id":"c1","scopes":{"user:u1":{"cursor":1}}}`},
			{"scope id empty", "/sync/pull", `{"client_id":"c1","scopes":{"":{"cursor":null}}}`},
			{"scope id too long", "/sync/pull", `{"client_id":"c1","scopes":{"` + strings.Repeat("s", 257) + `":{"cursor":null}}}`},
			{"cursor too long", "/sync/pull", `{"client_id":"c1","scopes":{"user:u1":{"cursor":"` + strings.Repeat("A", 4097) + `"}}}`},
			{"rebuild scope missing", "/sync/rebuild", `{"client_id":"c1"}`},
			{"rebuild scope number", "/sync/rebuild", `{"client_id":"c1","scope":1}`},
			{"rebuild cursor number", "/sync/rebuild", `{"client_id":"c1","scope":"user:u1","cursor":5}`},
			{"rebuild cursor too long", "/sync/rebuild", `{"client_id":"c1","scope":"user:u1","cursor":"` + strings.Repeat("A", 4097) + `"}`},
			{"rebuild of an unassigned scope", "/sync/rebuild", `{"client_id":"c1","scope":"user:u2"}`},
			{"rebuild of an unknown scope", "/sync/rebuild", `{"client_id":"c1","scope":"project:nowhere"}`},
			{"rebuild with a garbage session cursor", "/sync/rebuild", `{"client_id":"c1","scope":"user:u1","cursor":"garbage.cursor"}`},
			{"mutations missing", "/sync/push", `{"client_id":"c1"}`},
			{"mutations null", "/sync/push", `{"client_id":"c1","mutations":null}`},
			{"mutations object", "/sync/push", `{"client_id":"c1","mutations":{}}`},
			{"mutation not an object", "/sync/push", pushWith(`"m1"`)},
			{"unknown op", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"merge","pk":{"id":"d1"}}`)},
			{"op missing", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","pk":{"id":"d1"}}`)},
			{"op upper case", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"INSERT","pk":{"id":"d1"}}`)},
			{"mutation_id missing", "/sync/push", pushWith(`{"table":"docs","op":"insert","pk":{"id":"d9"},"columns":{"owner_id":"u1"}}`)},
			{"mutation_id number", "/sync/push", pushWith(`{"mutation_id":1,"table":"docs","op":"insert","pk":{"id":"d9"}}`)},
			{"mutation_id too long", "/sync/push", pushWith(`{"mutation_id":"` + strings.Repeat("m", 257) + `","table":"docs","op":"delete","pk":{"id":"d9"}}`)},
			{"table missing", "/sync/push", pushWith(`{"mutation_id":"m1","op":"delete","pk":{"id":"d9"}}`)},
			{"pk missing", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"delete"}`)},
			{"pk null", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"delete","pk":null}`)},
			{"pk string", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"delete","pk":"d1"}`)},
			{"columns string", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"update","pk":{"id":"d1"},"columns":"x"}`)},
			{"base_version number", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"update","pk":{"id":"d1"},"base_version":3,"columns":{"title":"x"}}`)},
			{"batch_id number", "/sync/push", `{"client_id":"c1","batch_id":7,"mutations":[` + okMut + `]}`},
			{"batch_id too long", "/sync/push", `{"client_id":"c1","batch_id":"` + strings.Repeat("b", 257) + `","mutations":[` + okMut + `]}`},
			{"too deep", "/sync/connect", `{"client_id":"c1","protocol_version":3,"x":` + epDepth(32) + `}`},
			{"too deep in a column value", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"update","pk":{"id":"d1"},"columns":{"meta":` + epDepth(40) + `}}`)},
			{"very deep", "/sync/pull", `{"client_id":"c1","x":` + epDepth(100000) + `}`},
			{"NUL in client_id", "/sync/connect", `{"client_id":"c\u0000","protocol_version":3}`},
			{"NUL in a key", "/sync/pull", `{"client_id":"c1","scopes":{"user:u1\u0000":{"cursor":null}}}`},
			{"NUL in a column value", "/sync/push", pushWith(`{"mutation_id":"m1","table":"docs","op":"update","pk":{"id":"d1"},"columns":{"title":"a\u0000b"}}`)},
			{"NUL in an ignored field", "/sync/pull", `{"client_id":"c1","extra":"\u0000"}`},
			{"raw NUL byte", "/sync/pull", "{\"client_id\":\"c1\x00\"}"},
			{"invalid UTF-8", "/sync/connect", "{\"client_id\":\"c\xff\xfe\",\"protocol_version\":3}"},
			{"invalid UTF-8 in a column value", "/sync/push", pushWith("{\"mutation_id\":\"m1\",\"table\":\"docs\",\"op\":\"update\",\"pk\":{\"id\":\"d1\"},\"columns\":{\"title\":\"\xc3\x28\"}}")},
			{"overlong UTF-8", "/sync/pull", "{\"client_id\":\"\xc0\xaf\"}"},
			{"trailing data", "/sync/connect", `{"client_id":"c1","protocol_version":3} x`},
			{"trailing object", "/sync/pull", `{"client_id":"c1"}{"client_id":"c1"}`},
			{"trailing bracket", "/sync/pull", `{"client_id":"c1"}]`},
			{"trailing comma", "/sync/pull", `{"client_id":"c1"},`},
			{"two mutations, second bad", "/sync/push", `{"client_id":"c1","mutations":[` + okMut + `,{"mutation_id":"m2","table":"docs","op":"nope","pk":{"id":"d2"}}]}`},
			{"a mutation_id twice in one batch", "/sync/push", `{"client_id":"c1","mutations":[` + okMut + `,{"mutation_id":"m1","table":"docs","op":"insert","pk":{"id":"d9"},"columns":{"owner_id":"u1"}}]}`},
		}
		for _, c := range cases {
			r := e.post(t, "u1", c.path, c.body)
			epRequireError(t, c.name, r, http.StatusBadRequest, "invalid_request")
		}
		// The push with a bad second mutation is refused as a whole: its valid
		// first mutation was not applied or recorded.
		if title := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); title != "one" {
			t.Fatalf("a refused push wrote: title %q", title)
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation`); n != 0 {
			t.Fatalf("refused pushes recorded %d mutations", n)
		}
		// Depth 32 is within the limit.
		requireOK(t, "depth 32", e.post(t, "u1", "/sync/connect", `{"client_id":"c1","protocol_version":3,"x":`+epDepth(31)+`}`))
	})

	t.Run("client mistakes in values are never a 500", func(t *testing.T) {
		// Values PostgreSQL's jsonb cannot hold (lone surrogates, numbers beyond
		// numeric) are a client's mistake: answered 400, or rejected as a
		// mutation, never 500.
		col := func(v string) string {
			return `{"client_id":"c1","mutations":[{"mutation_id":"nv","table":"docs","op":"update","pk":{"id":"d1"},"columns":` + v + `}]}`
		}
		for name, body := range map[string]string{
			"lone high surrogate":       col(`{"title":"\ud800"}`),
			"lone low surrogate":        col(`{"title":"a\udc00b"}`),
			"reversed surrogates":       col(`{"title":"\udc00\ud800"}`),
			"surrogate in jsonb":        col(`{"meta":{"k":"\udbff"}}`),
			"surrogate in a json key":   col(`{"meta":{"\ud800":1}}`),
			"surrogate in pk":           `{"client_id":"c1","mutations":[{"mutation_id":"nv","table":"docs","op":"delete","pk":{"id":"\ud800"}}]}`,
			"number beyond numeric":     col(`{"meta":1e200000}`),
			"tiny number":               col(`{"meta":1e-200000}`),
			"long fraction":             col(`{"meta":0.` + strings.Repeat("1", 20000) + `}`),
			"long integer":              col(`{"meta":` + strings.Repeat("9", 140000) + `}`),
			"huge exponent":             col(`{"meta":1e99999999999999999999}`),
			"integer column 1e400":      col(`{"n":1e400}`),
			"integer pk 1e400":          `{"client_id":"c1","mutations":[{"mutation_id":"nv","table":"tasks","op":"delete","pk":{"id":1e400}}]}`,
			"integer pk -0":             `{"client_id":"c1","mutations":[{"mutation_id":"nv","table":"tasks","op":"delete","pk":{"id":-0}}]}`,
			"escaped surrogate pair ok": col(`{"title":"\ud83d\ude00"}`),
		} {
			r := e.epPostNumbers(t, "u1", "/sync/push", body)
			if r.Status >= 500 {
				t.Fatalf("%s: %d %s", name, r.Status, r.Raw)
			}
			if r.Status != http.StatusOK {
				epRequireError(t, name, r, http.StatusBadRequest, "invalid_request")
			}
		}
		// A few bytes such as 1e131071 are 131,072 digits wherever PostgreSQL
		// renders them: a body's numbers written out may not pass the body limit.
		r := e.epPostNumbers(t, "u1", "/sync/push", col(`{"meta":[`+strings.Repeat("1e131071,", 40)+`1]}`))
		epRequireError(t, "numbers of 5 million digits written out", r, http.StatusBadRequest, "invalid_request")
		requireOK(t, "floats near the double's limit", e.epPostNumbers(t, "u1", "/sync/push",
			col(`{"meta":[`+strings.Repeat("1.7976931348623157e308,", 1000)+`4.9e-324]}`)))
		if title := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); title != "one" && title != "\U0001F600" && title != "😀" {
			t.Fatalf("title %q", title)
		}
		e.d.Exec(t, `UPDATE app.docs SET title = 'one' WHERE id = 'd1'`)
		e.d.Exec(t, `DELETE FROM synchro.mutation`)
		for name, body := range map[string]string{
			"surrogate in a cursor":  `{"client_id":"c1","scopes":{"user:u1":{"cursor":"\ud800"}}}`,
			"surrogate in a scope":   `{"client_id":"c1","scopes":{"\ud800":{"cursor":null}}}`,
			"surrogate in client_id": `{"client_id":"\ud800"}`,
		} {
			if r := e.post(t, "u1", "/sync/pull", body); r.Status >= 500 {
				t.Fatalf("%s: %d %s", name, r.Status, r.Raw)
			}
		}
	})

	t.Run("rebuild session cursor tampered", func(t *testing.T) {
		first := requireOK(t, "rebuild page 1", e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "user:u1", "limit": 1}))
		if first["has_more"] != true {
			t.Fatalf("rebuild of 2 rows with limit 1 has no second page: %v", first)
		}
		cur := first["cursor"].(string)
		requireOK(t, "rebuild page 2", e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "user:u1", "cursor": cur, "limit": 1}))
		for i := 0; i < len(cur); i++ {
			bad := []byte(cur)
			bad[i] = epFlip(bad[i])
			r := e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "user:u1", "cursor": string(bad), "limit": 1})
			epRequireError(t, fmt.Sprintf("session cursor with byte %d edited", i), r, http.StatusBadRequest, "invalid_request", string(bad))
		}
		// A session cursor is bound to its scope and kind: not valid for another
		// scope, and a scope cursor is not a session cursor.
		r := e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "templates_public", "cursor": cur})
		epRequireError(t, "session cursor of another scope", r, http.StatusBadRequest, "invalid_request")
		final := e.rebuildScope(t, "u1", "c1", "templates_public", 10, newReplica())
		r = e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "templates_public", "cursor": final["final_scope_cursor"]})
		epRequireError(t, "scope cursor as session cursor", r, http.StatusBadRequest, "invalid_request")
	})

	t.Run("too many mutations", func(t *testing.T) {
		small := e.epServer(t, func(s *httpapi.Sync) { s.MaxMutations = 2 })
		m := func(id string) map[string]any {
			return mut(id, "docs", "update", map[string]any{"id": "d2"}, map[string]any{"title": "t-" + id})
		}
		r := small.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": []any{m("x1"), m("x2"), m("x3")}})
		epRequireError(t, "3 mutations with a limit of 2", r, http.StatusBadRequest, "invalid_request", "t-x1")
		if title := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd2'`); title != "two" {
			t.Fatalf("a refused push wrote: title %q", title)
		}
		resp := requireOK(t, "2 mutations", small.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": []any{m("x1"), m("x2")}}))
		if len(resp["accepted"].([]any)) != 2 {
			t.Fatalf("push of 2: %v", resp)
		}
	})

	t.Run("auth_required", func(t *testing.T) {
		valid := token(t, "u1")
		otherSecret, err := auth.MintHS256([]byte("another-secret-0123456789abcdefgh"), "sub", "u1", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		expired, err := auth.MintHS256([]byte(testJWTSecret), "sub", "u1", time.Hour, time.Now().Add(-3*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(valid, ".")
		forged, err := auth.MintHS256([]byte(testJWTSecret), "sub", "u2", time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// u2's claims with u1's signature.
		spliced := parts[0] + "." + strings.Split(forged, ".")[1] + "." + parts[2]
		headers := map[string]string{
			"no header":            "",
			"bad signature":        "Bearer " + otherSecret,
			"spliced claims":       "Bearer " + spliced,
			"expired":              "Bearer " + expired,
			"wrong scheme":         "Basic " + valid,
			"token scheme":         "Token " + valid,
			"no scheme":            valid,
			"empty bearer":         "Bearer ",
			"garbage token":        "Bearer not-a-token",
			"truncated token":      "Bearer " + valid[:len(valid)-3],
			"alg none":             "Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ1MSJ9.",
			"signature of another": "Bearer " + parts[0] + "." + parts[1] + "." + strings.Split(otherSecret, ".")[2],
		}
		bodies := map[string]any{
			"/sync/connect": map[string]any{"client_id": "c1", "protocol_version": 3},
			"/sync/push":    map[string]any{"client_id": "c1", "mutations": []any{mut("a1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "auth"})}},
			"/sync/pull":    map[string]any{"client_id": "c1"},
			"/sync/rebuild": map[string]any{"client_id": "c1", "scope": "user:u1"},
		}
		for name, h := range headers {
			for path, body := range bodies {
				r := e.epPostAuth(t, h, path, body)
				epRequireError(t, name+" "+path, r, http.StatusUnauthorized, "auth_required", valid, otherSecret, expired, testJWTSecret)
			}
			req, err := http.NewRequest(http.MethodGet, e.url+"/sync/schema", nil)
			if err != nil {
				t.Fatal(err)
			}
			if h != "" {
				req.Header.Set("Authorization", h)
			}
			epRequireError(t, name+" GET /sync/schema", do(t, req), http.StatusUnauthorized, "auth_required")
		}
		// Two Authorization headers are refused even when one is valid.
		req, err := http.NewRequest(http.MethodPost, e.url+"/sync/pull", strings.NewReader(`{"client_id":"c1"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("Authorization", "Bearer "+valid)
		req.Header.Add("Authorization", "Bearer "+valid)
		epRequireError(t, "two Authorization headers", do(t, req), http.StatusUnauthorized, "auth_required", valid)
		// Authentication comes before the body: an unauthenticated bad body is 401.
		epRequireError(t, "no header and a malformed body", e.post(t, "", "/sync/push", `{`), http.StatusUnauthorized, "auth_required")
		if title := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); title != "one" {
			t.Fatalf("an unauthenticated push wrote: title %q", title)
		}
		requireOK(t, "valid token", e.epPostAuth(t, "bearer "+valid, "/sync/pull", map[string]any{"client_id": "c1"}))
	})

	t.Run("client_conflict", func(t *testing.T) {
		// Not connected yet.
		for _, path := range []string{"/sync/push", "/sync/pull", "/sync/rebuild"} {
			r := e.post(t, "u1", path, map[string]any{"client_id": "never-connected", "scope": "user:u1",
				"mutations": []any{mut("n1", "docs", "insert", map[string]any{"id": "nc"}, map[string]any{"owner_id": "u1"})}})
			epRequireError(t, path+" before connect", r, http.StatusConflict, "client_conflict", "never-connected")
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM app.docs WHERE id = 'nc'`); n != 0 {
			t.Fatal("a push of an unconnected client wrote")
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.client WHERE client_id = 'never-connected'`); n != 0 {
			t.Fatal("push, pull or rebuild registered a client")
		}
		// c1 belongs to u1; u2 can neither connect with it nor use it.
		r := e.post(t, "u2", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3})
		epRequireError(t, "connect with another user's client_id", r, http.StatusConflict, "client_conflict", "u1")
		r = e.post(t, "u2", "/sync/push", map[string]any{"client_id": "c1",
			"mutations": []any{mut("s1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "stolen"})}})
		epRequireError(t, "push with another user's client_id", r, http.StatusConflict, "client_conflict", "u1", "stolen")
		r = e.post(t, "u2", "/sync/pull", map[string]any{"client_id": "c1", "scopes": map[string]any{"user:u1": map[string]any{"cursor": nil}}})
		epRequireError(t, "pull with another user's client_id", r, http.StatusConflict, "client_conflict", "u1")
		r = e.post(t, "u2", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "user:u1"})
		epRequireError(t, "rebuild with another user's client_id", r, http.StatusConflict, "client_conflict", "u1")
		if title := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); title != "one" {
			t.Fatalf("a push with a foreign client_id wrote: title %q", title)
		}
		if owner := queryText(t, e.d, `SELECT user_id FROM synchro.client WHERE client_id = 'c1'`); owner != "u1" {
			t.Fatalf("client c1 now belongs to %q", owner)
		}
	})

	t.Run("request_too_large", func(t *testing.T) {
		small := e.epServer(t, func(s *httpapi.Sync) { s.MaxBodyBytes = 256 })
		big := map[string]any{"client_id": "c1", "mutations": []any{
			mut("big", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": strings.Repeat("z", 1024)})}}
		for _, path := range []string{"/sync/connect", "/sync/push", "/sync/pull", "/sync/rebuild"} {
			epRequireError(t, path+" over the body cap", small.post(t, "u1", path, big), http.StatusRequestEntityTooLarge, "request_too_large", "zzzz")
		}
		requireOK(t, "a small pull", small.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1"}))
		if title := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); title != "one" {
			t.Fatalf("a refused push wrote: title %q", title)
		}
	})

	t.Run("schema_mismatch", func(t *testing.T) {
		bogus := map[string]any{"hash": "bogus", "version": 1}
		r := e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "schema": bogus,
			"mutations": []any{mut("sm1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "stale-schema"})}})
		epRequireError(t, "push with a stale schema", r, http.StatusUnprocessableEntity, "schema_mismatch", "stale-schema", "bogus")
		r = e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "schema": bogus})
		epRequireError(t, "pull with a stale schema", r, http.StatusUnprocessableEntity, "schema_mismatch", "bogus")
		r = e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "schema": bogus, "scope": "user:u1"})
		epRequireError(t, "rebuild with a stale schema", r, http.StatusUnprocessableEntity, "schema_mismatch", "bogus")
		if title := queryText(t, e.d, `SELECT title FROM app.docs WHERE id = 'd1'`); title != "one" {
			t.Fatalf("a push with a stale schema wrote: title %q", title)
		}
		// The current schema is accepted.
		cur := requireOK(t, "schema", e.epGet(t, "u1", "/sync/schema"))
		good := map[string]any{"hash": cur["hash"], "version": cur["version"]}
		requireOK(t, "pull with the current schema", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "schema": good}))
		resp := requireOK(t, "empty push with the current schema", e.post(t, "u1", "/sync/push",
			map[string]any{"client_id": "c1", "schema": good, "mutations": []any{}}))
		if len(resp["accepted"].([]any))+len(resp["rejected"].([]any)) != 0 {
			t.Fatalf("empty push: %v", resp)
		}
	})
}

// epFlip is another base64url character than b (or a base64url character for
// the separator).
func epFlip(b byte) byte {
	switch {
	case b == 'A':
		return 'B'
	case b == '.':
		return 'A'
	default:
		return 'A'
	}
}

// TestSyncEndpointConnect: connect's schema negotiation (replace for a new
// client, none for the current hash, rebuild_local for an unknown one, replace
// when tables were only added), stable schema version and hash matching GET
// /sync/schema, the scope diff against known_scopes, rebuild of known scopes
// whose cursor cannot resume, 426 upgrade_required for old protocols and app
// versions, and gzip answers.
func TestSyncEndpointConnect(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one'), ('d2', 'u1', 'two');
		INSERT INTO app.templates VALUES (1, 'welcome')`)
	connect := func(t *testing.T, req map[string]any) map[string]any {
		t.Helper()
		body := map[string]any{"client_id": "c1", "protocol_version": 3, "platform": "test", "app_version": "1.0.0"}
		for k, v := range req {
			body[k] = v
		}
		return requireOK(t, "connect", e.post(t, "u1", "/sync/connect", body))
	}
	schemaOf := func(t *testing.T, resp map[string]any) (float64, string, string) {
		t.Helper()
		s := resp["schema"].(map[string]any)
		return s["version"].(float64), s["hash"].(string), s["action"].(string)
	}

	first := connect(t, nil)
	version, hash, action := schemaOf(t, first)
	if action != "replace" || first["schema_definition"] == nil {
		t.Fatalf("a new client without schema gets action %q, definition %v", action, first["schema_definition"] != nil)
	}
	if first["protocol_version"] != float64(3) || first["scope_set_version"] != float64(1) {
		t.Fatalf("connect answer %v", first)
	}
	if _, err := time.Parse(time.RFC3339, first["server_time"].(string)); err != nil || !strings.HasSuffix(first["server_time"].(string), "Z") {
		t.Fatalf("server_time %v is not RFC 3339 UTC", first["server_time"])
	}
	epRequireList(t, "scopes.add of a new client", epAddIDs(t, first["scopes"].(map[string]any)["add"]), "templates_public", "user:u1")
	epRequireList(t, "rebuild of a new client", epStrings(first["rebuild"]))
	if bytes.Contains([]byte(mustMarshal(t, first)), []byte("welcome")) {
		t.Fatalf("connect returned row data: %v", first)
	}

	t.Run("schema", func(t *testing.T) {
		again := connect(t, map[string]any{"schema": map[string]any{"version": version, "hash": hash}})
		v, h, a := schemaOf(t, again)
		if v != version || h != hash || a != "none" {
			t.Fatalf("connect with the current schema: version %v hash %v action %v (first %v %v)", v, h, a, version, hash)
		}
		if _, ok := again["schema_definition"]; ok {
			t.Fatal("schema_definition with action none")
		}
		// Version and hash are stable across calls and match GET /sync/schema.
		s := requireOK(t, "GET /sync/schema", e.epGet(t, "u1", "/sync/schema"))
		if s["version"] != version || s["hash"] != hash {
			t.Fatalf("GET /sync/schema version %v hash %v, connect %v %v", s["version"], s["hash"], version, hash)
		}
		def := first["schema_definition"].(map[string]any)
		if a, b := mustMarshal(t, def), mustMarshal(t, s); a != b {
			t.Fatalf("connect's schema_definition %s differs from GET /sync/schema %s", a, b)
		}
		if s2 := requireOK(t, "GET /sync/schema again", e.epGet(t, "u2", "/sync/schema")); mustMarshal(t, s2) != mustMarshal(t, s) {
			t.Fatal("GET /sync/schema is not stable")
		}
		tables := map[string]map[string]any{}
		for _, it := range s["tables"].([]any) {
			tb := it.(map[string]any)
			tables[tb["name"].(string)] = tb
		}
		if len(tables) != 4 || tables["docs"] == nil || tables["tasks"] == nil || tables["notes"] == nil || tables["templates"] == nil {
			t.Fatalf("manifest tables %v", s["tables"])
		}
		cols := map[string]string{}
		for _, it := range tables["docs"]["columns"].([]any) {
			c := it.(map[string]any)
			cols[c["name"].(string)] = fmt.Sprintf("%v/%v", c["type"], c["nullable"])
		}
		want := map[string]string{"id": "string/false", "owner_id": "string/false", "title": "string/true", "n": "int/true",
			"data": "bytes/true", "at": "datetime/true", "meta": "json/true"}
		if mustMarshal(t, cols) != mustMarshal(t, want) {
			t.Fatalf("docs columns %v, want %v", cols, want)
		}
		if pk := epStrings(tables["docs"]["primary_key"]); !slices.Equal(pk, []string{"id"}) {
			t.Fatalf("docs primary_key %v", pk)
		}
		if tables["docs"]["composition"] != "single_scope" || tables["notes"]["composition"] != "multi_scope" {
			t.Fatalf("compositions docs %v notes %v", tables["docs"]["composition"], tables["notes"]["composition"])
		}
		for _, it := range tables["tasks"]["columns"].([]any) {
			if c := it.(map[string]any); c["name"] == "id" && c["type"] != "int64" {
				t.Fatalf("tasks.id type %v", c["type"])
			}
		}
		epRequireNoLeak(t, "GET /sync/schema", e.epGet(t, "u1", "/sync/schema").Raw)
		// The version moves forward exactly when the hash changes: not here.
		n := queryInt(t, e.d, `SELECT count(*) FROM synchro.schema_version`)
		for i := 0; i < 3; i++ {
			connect(t, nil)
			requireOK(t, "GET /sync/schema", e.epGet(t, "u1", "/sync/schema"))
		}
		if m := queryInt(t, e.d, `SELECT count(*) FROM synchro.schema_version`); m != n {
			t.Fatalf("%d schema versions recorded without a registry change (was %d)", m, n)
		}
	})

	// A valid cursor of user:u1.
	cur := e.rebuildScope(t, "u1", "c1", "user:u1", 10, newReplica())["final_scope_cursor"].(string)
	current := map[string]any{"version": version, "hash": hash}

	t.Run("scope diff", func(t *testing.T) {
		resp := connect(t, map[string]any{"schema": current, "known_scopes": map[string]any{
			"user:u1": map[string]any{"cursor": cur}, "project:gone": map[string]any{"cursor": nil}, "user:u2": map[string]any{"cursor": cur}}})
		scopes := resp["scopes"].(map[string]any)
		epRequireList(t, "scopes.add", epAddIDs(t, scopes["add"]), "templates_public")
		epRequireList(t, "scopes.remove", epStrings(scopes["remove"]), "project:gone", "user:u2")
		epRequireList(t, "rebuild with a valid cursor", epStrings(resp["rebuild"]))
		if resp["scope_set_version"] != float64(1) {
			t.Fatalf("scope_set_version %v", resp["scope_set_version"])
		}
		// Every assigned scope known: nothing to add or remove.
		resp = connect(t, map[string]any{"schema": current, "known_scopes": map[string]any{
			"user:u1": map[string]any{"cursor": cur}, "templates_public": map[string]any{"cursor": nil}}})
		scopes = resp["scopes"].(map[string]any)
		epRequireList(t, "scopes.add", epAddIDs(t, scopes["add"]))
		epRequireList(t, "scopes.remove", epStrings(scopes["remove"]))
		epRequireList(t, "rebuild of a null cursor", epStrings(resp["rebuild"]), "templates_public")
	})

	t.Run("unresumable cursors", func(t *testing.T) {
		for name, bad := range map[string]any{
			"garbage":                  "garbage",
			"empty":                    "",
			"edited":                   cur[:len(cur)-1] + string(epFlip(cur[len(cur)-1])),
			"cursor of another scope":  e.rebuildScope(t, "u1", "c1", "templates_public", 10, newReplica())["final_scope_cursor"],
			"not base64":               "!!!.???",
			"another generation":       queryText(t, e.d, `SELECT synchro.scope_cursor(gen_random_uuid(), k, 'user:u1', '0/0', 0, 0) FROM synchro.client k WHERE client_id = 'c1'`),
			"past the high-watermark":  queryText(t, e.d, `SELECT synchro.scope_cursor(stream_generation, k, 'user:u1', 'FFFFFFFF/0', 0, 0) FROM synchro.progress, synchro.client k WHERE client_id = 'c1'`),
			"three dots":               "a.b.c",
			"session cursor":           "eyJ4Ijo.AAAA",
			"truncated valid cursor":   cur[:len(cur)/2],
			"valid cursor with suffix": cur + "A",
		} {
			resp := connect(t, map[string]any{"schema": current, "known_scopes": map[string]any{
				"user:u1": map[string]any{"cursor": bad}, "templates_public": map[string]any{"cursor": nil}}})
			epRequireList(t, name+": rebuild", epStrings(resp["rebuild"]), "templates_public", "user:u1")
			v, h, a := schemaOf(t, resp)
			if v != version || h != hash || a != "none" {
				t.Fatalf("%s: schema %v %v %v", name, v, h, a)
			}
		}
	})

	t.Run("rebuild_local for an unknown hash", func(t *testing.T) {
		resp := connect(t, map[string]any{"schema": map[string]any{"version": 99, "hash": "bogus"},
			"known_scopes": map[string]any{"user:u1": map[string]any{"cursor": cur}, "project:gone": map[string]any{"cursor": cur}}})
		v, h, a := schemaOf(t, resp)
		if a != "rebuild_local" || v != version || h != hash || resp["schema_definition"] == nil {
			t.Fatalf("unknown hash: action %v version %v hash %v definition %v", a, v, h, resp["schema_definition"] != nil)
		}
		epRequireList(t, "rebuild_local: rebuild", epStrings(resp["rebuild"]), "user:u1")
		epRequireList(t, "rebuild_local: remove", epStrings(resp["scopes"].(map[string]any)["remove"]), "project:gone")
		epRequireNoLeak(t, "rebuild_local", mustMarshalBytes(t, resp), "bogus")
	})

	t.Run("upgrade_required", func(t *testing.T) {
		for _, pv := range []any{2, 1, 0, -1, -3000000000} {
			r := e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": pv, "app_version": "1.0.0"})
			epRequireError(t, fmt.Sprintf("protocol_version %v", pv), r, http.StatusUpgradeRequired, "upgrade_required")
			if sch, _ := r.Body["schema"].(map[string]any); sch["action"] != "unsupported" {
				t.Fatalf("protocol_version %v: 426 without schema.action unsupported: %s", pv, r.Raw)
			}
		}
		// A newer protocol than the server's is answered with the server's.
		for _, pv := range []any{4, 3000000000} {
			resp := requireOK(t, "newer protocol", e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": pv}))
			if resp["protocol_version"] != float64(3) {
				t.Fatalf("protocol_version %v answered with %v", pv, resp["protocol_version"])
			}
		}
		e.d.Exec(t, `SELECT synchro.configure_protocol(3, '2.0.0')`)
		defer e.d.Exec(t, `SELECT synchro.configure_protocol(3, NULL)`)
		for _, av := range []string{"1.9.9", "1.10.0", "0.1", "1.99999999999999999999", "1." + strings.Repeat("9", 250)} {
			r := e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3, "app_version": av})
			epRequireError(t, "app_version "+av[:min(len(av), 30)], r, http.StatusUpgradeRequired, "upgrade_required")
		}
		// An app_version or platform beyond the identifier limit is refused.
		for _, field := range []string{"app_version", "platform"} {
			r := e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3, field: "1." + strings.Repeat("9", 200000)})
			epRequireError(t, "long "+field, r, http.StatusBadRequest, "invalid_request")
		}
		for _, av := range []string{"2.0.0", "2.0.1", "10.0", "2.0.0.1"} {
			requireOK(t, "app_version "+av, e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3, "app_version": av}))
		}
		// Nothing about the client changed by a refused connect.
		if v := queryText(t, e.d, `SELECT app_version FROM synchro.client WHERE client_id = 'c1'`); v != "2.0.0.1" {
			t.Fatalf("app_version recorded %q", v)
		}
	})

	t.Run("gzip", func(t *testing.T) {
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
		for _, path := range []string{"/sync/connect", "/sync/schema"} {
			method, body := http.MethodPost, `{"client_id":"c1","protocol_version":3}`
			if path == "/sync/schema" {
				method, body = http.MethodGet, ""
			}
			req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token(t, "u1"))
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("%s with Accept-Encoding gzip: status %d, Content-Encoding %q", path, resp.StatusCode, resp.Header.Get("Content-Encoding"))
			}
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			plain, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(plain, &v); err != nil || v["hash"] == nil && v["schema"] == nil {
				t.Fatalf("%s: gunzipped answer %q: %v", path, plain, err)
			}
		}
		// Without Accept-Encoding the answer is plain.
		req, err := http.NewRequest(http.MethodGet, e.url+"/sync/schema", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token(t, "u1"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("Content-Encoding %q without Accept-Encoding", resp.Header.Get("Content-Encoding"))
		}
	})

	t.Run("schema change", func(t *testing.T) {
		// A table is only added: a client of the old schema replaces it.
		e.d.Exec(t, `CREATE TABLE app.extra (id text PRIMARY KEY, owner_id text NOT NULL);
			SELECT synchro.register_table('app.extra', '{"kind":"column","template":"user:{owner_id}"}')`)
		resp := connect(t, map[string]any{"schema": current, "known_scopes": map[string]any{"user:u1": map[string]any{"cursor": cur}}})
		v, h, a := schemaOf(t, resp)
		if a != "replace" || v <= version || h == hash || resp["schema_definition"] == nil {
			t.Fatalf("after adding a table: action %v version %v (was %v) hash %v (was %v)", a, v, version, h, hash)
		}
		s := requireOK(t, "GET /sync/schema", e.epGet(t, "u1", "/sync/schema"))
		if s["version"] != v || s["hash"] != h || len(s["tables"].([]any)) != 5 {
			t.Fatalf("GET /sync/schema after adding a table: %v %v %d tables", s["version"], s["hash"], len(s["tables"].([]any)))
		}
		// The old hash no longer pushes or pulls. Pull passes the capture gate
		// first, which answers 503 not_ready until the worker has activated the
		// registry generation of app.extra; no pull or rebuild ran since the
		// registration, so the gate's cached answer is the ready one from before
		// it, or is asked afresh.
		waitCaptureReady(t, e.d)
		r := e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "schema": current})
		epRequireError(t, "pull with the previous schema", r, http.StatusUnprocessableEntity, "schema_mismatch")
	})
}

func mustMarshalBytes(t *testing.T, v any) []byte {
	t.Helper()
	return []byte(mustMarshal(t, v))
}

// TestSyncEndpointScopeAssignment: the scope set follows the live assignment:
// a shared scope registered after connect arrives in the next pull's
// scope_updates.add with a bigger scope_set_version, a custom assignment
// function replaces the set (scopes it drops are removed, never served, and
// cannot be rebuilt), and the version moves only when the set changes.
func TestSyncEndpointScopeAssignment(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.templates VALUES (1, 'welcome')`)
	e.connect(t, "u1", "c1")
	pull := func(t *testing.T, scopes ...string) map[string]any {
		t.Helper()
		req := map[string]any{}
		for _, s := range scopes {
			req[s] = map[string]any{"cursor": nil}
		}
		return requireOK(t, "pull", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "scopes": req}))
	}
	check := func(t *testing.T, resp map[string]any, version float64, add, remove []string) {
		t.Helper()
		if resp["scope_set_version"] != version {
			t.Fatalf("scope_set_version %v, want %v", resp["scope_set_version"], version)
		}
		u := resp["scope_updates"].(map[string]any)
		epRequireList(t, "scope_updates.add", epAddIDs(t, u["add"]), add...)
		epRequireList(t, "scope_updates.remove", epStrings(u["remove"]), remove...)
		if n := len(resp["changes"].([]any)); n != 0 {
			t.Fatalf("changes for null cursors: %v", resp["changes"])
		}
	}

	resp := pull(t)
	check(t, resp, 1, []string{"templates_public", "user:u1"}, nil)
	resp = pull(t, "templates_public", "user:u1")
	check(t, resp, 1, nil, nil)
	epRequireList(t, "rebuild of null cursors", epStrings(resp["rebuild"]), "templates_public", "user:u1")

	e.d.Exec(t, `SELECT synchro.register_shared_scope('news')`)
	check(t, pull(t, "templates_public", "user:u1"), 2, []string{"news"}, nil)
	check(t, pull(t, "templates_public", "user:u1"), 2, []string{"news"}, nil)
	check(t, pull(t, "news", "templates_public", "user:u1"), 2, nil, nil)
	// Registering it again (no change of the set) keeps the version.
	e.d.Exec(t, `SELECT synchro.register_shared_scope('news')`)
	check(t, pull(t, "news", "templates_public", "user:u1"), 2, nil, nil)
	conn := requireOK(t, "connect", e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3}))
	if conn["scope_set_version"] != float64(2) {
		t.Fatalf("connect scope_set_version %v", conn["scope_set_version"])
	}
	requireOK(t, "rebuild of news", e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "news"}))
	// A real cursor of templates_public, with a change after it.
	tplCursor := e.rebuildScope(t, "u1", "c1", "templates_public", 10, newReplica())["final_scope_cursor"]
	e.d.Exec(t, `INSERT INTO app.templates VALUES (2, 'zz-later-zz')`)
	waitMaterialized(t, e.d)

	e.d.Exec(t, `CREATE FUNCTION app.assign(u text) RETURNS SETOF text LANGUAGE sql STABLE
		AS $$ SELECT 'user:' || u UNION ALL SELECT 'team:' || u || '-crew' UNION ALL SELECT '' UNION ALL SELECT NULL $$;
		SELECT synchro.set_scope_assignment('app.assign(text)')`)
	check(t, pull(t, "news", "templates_public", "user:u1"), 3, []string{"team:u1-crew"}, []string{"news", "templates_public"})
	check(t, pull(t, "team:u1-crew", "user:u1"), 3, nil, nil)
	resp = requireOK(t, "pull of a dropped scope", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "scopes": map[string]any{
		"team:u1-crew": map[string]any{"cursor": nil}, "user:u1": map[string]any{"cursor": nil}, "templates_public": map[string]any{"cursor": tplCursor}}}))
	check(t, resp, 3, nil, []string{"templates_public"})
	epRequireList(t, "rebuild", epStrings(resp["rebuild"]), "team:u1-crew", "user:u1")
	epRequireNoLeak(t, "pull of a dropped scope", mustMarshalBytes(t, resp), "zz-later-zz")
	if _, ok := resp["scope_cursors"].(map[string]any)["templates_public"]; ok {
		t.Fatalf("a removed scope got a cursor: %v", resp["scope_cursors"])
	}
	r := e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "templates_public"})
	epRequireError(t, "rebuild of a scope no longer assigned", r, http.StatusBadRequest, "invalid_request")
	requireOK(t, "rebuild of the new scope", e.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "team:u1-crew"}))
	// Another user's set is computed by the same function.
	conn = e.connect(t, "u2", "c2")
	epRequireList(t, "u2's scopes", epAddIDs(t, conn["scopes"].(map[string]any)["add"]), "team:u2-crew", "user:u2")

	// Back to the default: the set changes again.
	e.d.Exec(t, `SELECT synchro.set_scope_assignment(NULL)`)
	check(t, pull(t, "team:u1-crew", "user:u1"), 4, []string{"news", "templates_public"}, []string{"team:u1-crew"})
	check(t, pull(t, "news", "templates_public", "user:u1"), 4, nil, nil)
	if v := queryInt(t, e.d, `SELECT scope_set_version FROM synchro.client WHERE client_id = 'c1'`); v != 4 {
		t.Fatalf("stored scope_set_version %d", v)
	}
}

// TestSyncEndpointPushOutcomes: every push rejection code with its contract:
// version_conflict (stale base_version, insert of an existing row, update or
// delete of a missing row, or of another user's row, answered alike) with
// server_version and server_row; policy_rejected (read-only table, an upsert of
// another user's row, a change that moves a row out of the user's scopes, an
// insert into another user's scope) changing nothing;
// validation_failed naming the column or constraint, never the value;
// table_not_synced; server_retryable for a locked row, not recorded, so the
// same mutation applies once the lock is gone. A rejected mutation never rolls
// back another of the same push.
func TestSyncEndpointPushOutcomes(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title, n) VALUES ('d1', 'u1', 'one', 1), ('d2', 'u2', 'theirs', 2), ('d3', 'u1', 'three', 3);
		INSERT INTO app.projects VALUES ('p1', 'u1'); INSERT INTO app.templates VALUES (1, 'welcome')`)
	e.connect(t, "u1", "c1")
	e.connect(t, "u2", "c2")
	docs := func() string {
		return strings.Join(rowsOf(t, e.d, `SELECT concat_ws('|', id, owner_id, title, n) FROM app.docs ORDER BY id`), ",")
	}
	rejected := func(t *testing.T, resp map[string]any, id, status, code string) map[string]any {
		t.Helper()
		list, o := outcome(t, resp, id)
		if list != "rejected" || o["status"] != status || o["code"] != code {
			t.Fatalf("mutation %s: %s %v, want rejected %s %s", id, list, o, status, code)
		}
		if msg, _ := o["message"].(string); msg == "" {
			t.Fatalf("mutation %s: no message: %v", id, o)
		}
		return o
	}
	applied := func(t *testing.T, resp map[string]any, id string) map[string]any {
		t.Helper()
		list, o := outcome(t, resp, id)
		if list != "accepted" || o["status"] != "applied" || o["server_version"] == nil || o["server_version"] == "" {
			t.Fatalf("mutation %s: %s %v, want applied", id, list, o)
		}
		return o
	}

	t.Run("version_conflict", func(t *testing.T) {
		v1 := applied(t, e.push(t, "u1", "c1", mut("vc1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "v1"})), "vc1")["server_version"]
		up := mut("vc2", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "v2"})
		up["base_version"] = v1
		o := applied(t, e.push(t, "u1", "c1", up), "vc2")
		v2 := o["server_version"]
		if v2 == v1 {
			t.Fatal("the server version did not change")
		}
		if o["server_row"].(map[string]any)["title"] != "v2" {
			t.Fatalf("server_row %v", o["server_row"])
		}
		before := docs()
		for _, op := range []string{"update", "upsert", "delete"} {
			stale := mut("vc-stale-"+op, "docs", op, map[string]any{"id": "d1"}, map[string]any{"title": "stale-write"})
			if op == "delete" {
				delete(stale, "columns")
			}
			stale["base_version"] = v1
			resp := e.push(t, "u1", "c1", stale)
			o = rejected(t, resp, "vc-stale-"+op, "conflict", "version_conflict")
			if o["server_version"] != v2 || o["server_row"].(map[string]any)["title"] != "v2" || o["server_row"].(map[string]any)["id"] != "d1" {
				t.Fatalf("stale %s: server_version %v (current %v), server_row %v", op, o["server_version"], v2, o["server_row"])
			}
			epRequireNoLeak(t, "stale "+op, mustMarshalBytes(t, resp), "stale-write")
		}
		o = rejected(t, e.push(t, "u1", "c1", mut("vc-ins", "docs", "insert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "dup"})),
			"vc-ins", "conflict", "version_conflict")
		if o["server_version"] != v2 || o["server_row"].(map[string]any)["title"] != "v2" {
			t.Fatalf("insert of an existing row: %v", o)
		}
		for _, op := range []string{"update", "delete"} {
			m := mut("vc-missing-"+op, "docs", op, map[string]any{"id": "missing"}, map[string]any{"title": "x"})
			if op == "delete" {
				delete(m, "columns")
			}
			o = rejected(t, e.push(t, "u1", "c1", m), "vc-missing-"+op, "conflict", "version_conflict")
			if v, ok := o["server_row"]; !ok || v != nil || o["server_version"] != nil {
				t.Fatalf("%s of a missing row: %v", op, o)
			}
		}
		if after := docs(); after != before {
			t.Fatalf("conflicts wrote: %s -> %s", before, after)
		}
		// The current version is accepted, and an upsert without base applies.
		up = mut("vc3", "docs", "delete", map[string]any{"id": "d1"}, nil)
		up["base_version"] = v2
		applied(t, e.push(t, "u1", "c1", up), "vc3")
		o = applied(t, e.push(t, "u1", "c1", mut("vc4", "docs", "upsert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "one", "n": 1})), "vc4")
		if o["server_row"].(map[string]any)["title"] != "one" {
			t.Fatalf("upsert: %v", o)
		}
	})

	t.Run("policy_rejected", func(t *testing.T) {
		before := docs()
		templates := rowsOf(t, e.d, `SELECT concat_ws('|', id, name) FROM app.templates ORDER BY id`)
		resp := e.push(t, "u1", "c1",
			mut("p-t-ins", "templates", "insert", map[string]any{"id": 2}, map[string]any{"name": "zz-template-zz"}),
			mut("p-t-upd", "templates", "update", map[string]any{"id": 1}, map[string]any{"name": "zz-template-zz"}),
			mut("p-t-del", "templates", "delete", map[string]any{"id": 1}, nil),
			mut("p-other-upd", "docs", "update", map[string]any{"id": "d2"}, map[string]any{"title": "zz-hijack-zz"}),
			mut("p-other-del", "docs", "delete", map[string]any{"id": "d2"}, nil),
			mut("p-other-upsert", "docs", "upsert", map[string]any{"id": "d2"}, map[string]any{"title": "zz-hijack-zz"}),
			mut("p-move", "docs", "update", map[string]any{"id": "d3"}, map[string]any{"owner_id": "u2"}),
			mut("p-ins-other", "docs", "insert", map[string]any{"id": "d9"}, map[string]any{"owner_id": "u2", "title": "zz-planted-zz"}),
			mut("p-task", "tasks", "insert", map[string]any{"id": 5}, map[string]any{"project_id": "nowhere-project", "title": "zz-orphan-zz"}),
		)
		for _, id := range []string{"p-t-ins", "p-t-upd", "p-t-del", "p-other-upsert", "p-move", "p-ins-other"} {
			o := rejected(t, resp, id, "rejected", "policy_rejected")
			if _, ok := o["server_row"]; ok {
				t.Fatalf("%s: a policy rejection carries a row: %v", id, o)
			}
		}
		// An update or delete of another user's row: as of a missing row.
		for _, id := range []string{"p-other-upd", "p-other-del"} {
			if o := rejected(t, resp, id, "conflict", "version_conflict"); o["server_row"] != nil || o["message"] != "the row does not exist" {
				t.Fatalf("%s: %v", id, o)
			}
		}
		// An orphan task (no project) is in no scope: refused (policy or constraint).
		if list, o := outcome(t, resp, "p-task"); list != "rejected" || (o["code"] != "policy_rejected" && o["code"] != "validation_failed") {
			t.Fatalf("orphan task: %s %v", list, o)
		}
		epRequireNoLeak(t, "policy rejections", mustMarshalBytes(t, resp), "theirs", "zz-template-zz", "zz-hijack-zz", "zz-planted-zz")
		if after := docs(); after != before {
			t.Fatalf("policy rejections wrote app.docs: %s -> %s", before, after)
		}
		if got := rowsOf(t, e.d, `SELECT concat_ws('|', id, name) FROM app.templates ORDER BY id`); !slices.Equal(got, templates) {
			t.Fatalf("policy rejections wrote app.templates: %v", got)
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM app.tasks`); n != 0 {
			t.Fatal("an orphan task was written")
		}
		// u2 may change its own row; the owner may move d3 away only as u2 can't.
		applied(t, e.push(t, "u2", "c2", mut("p-own", "docs", "update", map[string]any{"id": "d2"}, map[string]any{"title": "theirs2"})), "p-own")
	})

	t.Run("validation_failed", func(t *testing.T) {
		before := docs()
		cases := []struct {
			id, table string
			pk        map[string]any
			op        string
			cols      map[string]any
			names     string // what the message must name
			value     string // what the answer must not contain
		}{
			{"v-notnull", "docs", map[string]any{"id": "v1"}, "insert", map[string]any{"title": "zz-nn-zz"}, `"owner_id"`, ""},
			{"v-notnull-update", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"owner_id": nil}, `"owner_id"`, ""},
			{"v-check", "docs", map[string]any{"id": "v2"}, "insert", map[string]any{"owner_id": "u1", "n": -987654}, `docs_n_check`, "-987654"},
			{"v-check-update", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"n": -987653}, `docs_n_check`, "-987653"},
			{"v-type", "docs", map[string]any{"id": "v3"}, "insert", map[string]any{"owner_id": "u1", "n": "zz-not-a-number-zz"}, `"n"`, "zz-not-a-number-zz"},
			{"v-type-fraction", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"n": 1.25}, `"n"`, "1.25"},
			{"v-type-bool", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"n": true}, `"n"`, ""},
			{"v-range", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"n": 98765432109876}, `"n"`, "98765432109876"},
			{"v-time", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"at": "zz-not-a-time-zz"}, `"at"`, "zz-not-a-time-zz"},
			{"v-unknown", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"nope_col": "zz-unknown-zz"}, `"nope_col"`, "zz-unknown-zz"},
			{"v-pk-type", "docs", map[string]any{"id": 424242}, "insert", map[string]any{"owner_id": "u1"}, `"id"`, ""},
			{"v-pk-int", "tasks", map[string]any{"id": "zz-not-int-zz"}, "insert", map[string]any{"project_id": "p1"}, `"id"`, ""},
			{"v-pk-fraction", "tasks", map[string]any{"id": 1.5}, "insert", map[string]any{"project_id": "p1"}, `"id"`, ""},
			{"v-pk-range", "tasks", map[string]any{"id": json.Number("99999999999999999999")}, "insert", map[string]any{"project_id": "p1"}, `"id"`, ""},
			{"v-pk-bigint-range", "tasks", map[string]any{"id": json.Number("9999999999999999999")}, "insert", map[string]any{"project_id": "p1"}, `"id"`, ""},
			{"v-pk-wrong-column", "docs", map[string]any{"key": "d3"}, "update", map[string]any{"title": "x"}, `"id"`, ""},
			{"v-pk-two-columns", "docs", map[string]any{"id": "d3", "owner_id": "u1"}, "update", map[string]any{"title": "x"}, `"id"`, ""},
			{"v-pk-empty", "docs", map[string]any{}, "update", map[string]any{"title": "x"}, `"id"`, ""},
			{"v-pk-too-long", "docs", map[string]any{"id": strings.Repeat("zz-long-key-", 100)}, "insert", map[string]any{"owner_id": "u1"}, `"id" is longer than 1024 bytes`, "zz-long-key-"},
			{"v-key-differs", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"id": "zz-other-key-zz"}, `"id"`, "zz-other-key-zz"},
			{"v-empty-update", "docs", map[string]any{"id": "d3"}, "update", map[string]any{}, "", ""},
			{"v-base64", "docs", map[string]any{"id": "d3"}, "update", map[string]any{"data": "zz*not*base64*zz"}, `"data"`, "zz*not*base64*zz"},
			{"v-fk", "tasks", map[string]any{"id": 6}, "insert", map[string]any{"project_id": "p1", "title": "ok"}, "", ""},
		}
		var muts []map[string]any
		for _, c := range cases {
			muts = append(muts, mut(c.id, c.table, c.op, c.pk, c.cols))
		}
		resp := e.push(t, "u1", "c1", muts...)
		raw := mustMarshalBytes(t, resp)
		for _, c := range cases {
			if c.id == "v-fk" {
				applied(t, resp, c.id)
				continue
			}
			o := rejected(t, resp, c.id, "rejected", "validation_failed")
			if msg := o["message"].(string); !strings.Contains(msg, c.names) {
				t.Fatalf("%s: message %q does not name %s", c.id, msg, c.names)
			}
			if c.value != "" && strings.Contains(o["message"].(string), c.value) {
				t.Fatalf("%s: message quotes the value: %v", c.id, o)
			}
		}
		epRequireNoLeak(t, "validation failures", raw, "zz-nn-zz", "-987654", "-987653", "zz-not-a-number-zz", "98765432109876",
			"zz-not-a-time-zz", "zz-unknown-zz", "zz*not*base64*zz", "zz-other-key-zz")
		if after := docs(); after != before {
			t.Fatalf("validation failures wrote: %s -> %s", before, after)
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM app.tasks`); n != 1 {
			t.Fatalf("%d tasks, want the one valid insert", n)
		}
	})

	t.Run("table_not_synced", func(t *testing.T) {
		resp := e.push(t, "u1", "c1",
			mut("ns1", "nope", "insert", map[string]any{"id": "x"}, map[string]any{"a": "zz-ns-zz"}),
			mut("ns2", "app.docs", "insert", map[string]any{"id": "x"}, map[string]any{"owner_id": "u1"}),
			mut("ns3", "note_members", "insert", map[string]any{"id": 1}, map[string]any{"note_id": "n", "user_id": "u1"}),
			mut("ns4", "client", "delete", map[string]any{"client_id": "c2"}, nil),
			mut("ns5", "projects", "insert", map[string]any{"id": "p9"}, map[string]any{"owner_id": "u1"}),
			mut("ns6", "Docs", "insert", map[string]any{"id": "x"}, map[string]any{"owner_id": "u1"}))
		for _, id := range []string{"ns1", "ns2", "ns3", "ns4", "ns5", "ns6"} {
			o := rejected(t, resp, id, "rejected", "table_not_synced")
			epRequireNoLeak(t, "table_not_synced "+id, []byte(o["message"].(string)), "zz-ns-zz")
		}
		// (The answer echoes the requested table name, "app.docs" here, and nothing else.)
		if bytes.Contains(mustMarshalBytes(t, resp), []byte("zz-ns-zz")) {
			t.Fatalf("table_not_synced echoes a column value: %v", resp)
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.client WHERE client_id = 'c2'`); n != 1 {
			t.Fatal("a push deleted a client")
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM app.projects WHERE id = 'p9'`); n != 0 {
			t.Fatal("a push wrote a dependency table")
		}
	})

	t.Run("a rejection never rolls back another mutation", func(t *testing.T) {
		resp := e.push(t, "u1", "c1",
			mut("rb1", "docs", "insert", map[string]any{"id": "r1"}, map[string]any{"owner_id": "u1", "title": "first"}),
			mut("rb2", "docs", "insert", map[string]any{"id": "r2"}, map[string]any{"owner_id": "u1", "n": -1}),
			mut("rb3", "docs", "update", map[string]any{"id": "d2"}, map[string]any{"title": "x"}),
			mut("rb4", "docs", "insert", map[string]any{"id": "r1"}, map[string]any{"owner_id": "u1", "title": "again"}),
			mut("rb5", "nope", "delete", map[string]any{"id": "r1"}, nil),
			mut("rb6", "docs", "update", map[string]any{"id": "r1"}, map[string]any{"title": "second"}),
			mut("rb7", "docs", "update", map[string]any{"id": "r1"}, map[string]any{"owner_id": "u2"}))
		applied(t, resp, "rb1")
		rejected(t, resp, "rb2", "rejected", "validation_failed")
		rejected(t, resp, "rb3", "conflict", "version_conflict") // another user's row: as a missing one
		rejected(t, resp, "rb4", "conflict", "version_conflict")
		rejected(t, resp, "rb5", "rejected", "table_not_synced")
		o := applied(t, resp, "rb6")
		rejected(t, resp, "rb7", "rejected", "policy_rejected")
		if got := queryText(t, e.d, `SELECT concat_ws('|', owner_id, title) FROM app.docs WHERE id = 'r1'`); got != "u1|second" {
			t.Fatalf("r1 is %q", got)
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM app.docs WHERE id = 'r2'`); n != 0 {
			t.Fatal("the rejected insert was written")
		}
		// Outcomes come in request order within each list.
		var ids []string
		for _, it := range resp["accepted"].([]any) {
			ids = append(ids, it.(map[string]any)["mutation_id"].(string))
		}
		for _, it := range resp["rejected"].([]any) {
			ids = append(ids, it.(map[string]any)["mutation_id"].(string))
		}
		epRequireList(t, "outcome order", ids, "rb1", "rb6", "rb2", "rb3", "rb4", "rb5", "rb7")
		if o["server_version"] != rowVersion(t, e.d, "app.docs", "r1") {
			t.Fatalf("server_version %v is not the row's version", o["server_version"])
		}
	})

	t.Run("edge values round-trip", func(t *testing.T) {
		// Values push accepts are captured (no poison) and pulled exactly as
		// push's server_row rendered them.
		values := []map[string]any{
			{"at": "infinity", "meta": map[string]any{"big": json.Number("1e300"), "neg": json.Number("-0"), "s": "é😀\u2028"}},
			{"at": "-infinity", "data": "", "meta": []any{}},
			{"at": "0044-03-15 12:00:00 BC", "data": "AAEC/w==", "meta": "just a string"},
			{"at": "2026-03-20T18:22:11.123456+05:30", "n": 2147483647, "meta": nil, "title": strings.Repeat("é", 1000)},
			{"at": "1970-01-01", "n": 0, "meta": json.Number("123456789012345678901234567890.5"), "title": ""},
		}
		var muts []map[string]any
		for i, v := range values {
			cols := map[string]any{"owner_id": "u1"}
			for k, x := range v {
				cols[k] = x
			}
			muts = append(muts, mut(fmt.Sprintf("ev%d", i), "docs", "insert", map[string]any{"id": fmt.Sprintf("ev%d", i)}, cols))
		}
		resp := e.push(t, "u1", "c1", muts...)
		rows := map[string]map[string]any{}
		for i := range values {
			o := applied(t, resp, fmt.Sprintf("ev%d", i))
			rows[fmt.Sprintf("ev%d", i)] = o["server_row"].(map[string]any)
		}
		waitMaterialized(t, e.d)
		r := newReplica()
		e.rebuildScope(t, "u1", "c1", "user:u1", 3, r)
		e.requireConverged(t, r, "user:u1")
		for id, row := range rows {
			got := r.rows["user:u1"][rowKey("docs", map[string]any{"id": id})].Row
			if mustMarshal(t, got) != mustMarshal(t, row) {
				t.Fatalf("%s: pulled %s, push answered %s", id, mustMarshal(t, got), mustMarshal(t, row))
			}
		}
		requireOK(t, "readiness", e.epGet(t, "u1", "/readyz"))
	})

	t.Run("server_retryable", func(t *testing.T) {
		quick := e.epServer(t, func(s *httpapi.Sync) { s.PushLockTimeout = 100 * time.Millisecond })
		ctx := context.Background()
		tx, err := e.d.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, `SELECT * FROM app.docs WHERE id = 'd3' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		m := mut("sr1", "docs", "update", map[string]any{"id": "d3"}, map[string]any{"title": "after-lock"})
		other := mut("sr2", "docs", "insert", map[string]any{"id": "s2"}, map[string]any{"owner_id": "u1", "title": "free"})
		resp := quick.push(t, "u1", "c1", m, other)
		rejected(t, resp, "sr1", "retry", "server_retryable")
		applied(t, resp, "sr2")
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation WHERE client_id = 'c1' AND mutation_id = 'sr1'`); n != 0 {
			t.Fatal("a server_retryable outcome was recorded")
		}
		// Still locked: still retryable, never a recorded failure.
		rejected(t, quick.push(t, "u1", "c1", m), "sr1", "retry", "server_retryable")
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		o := applied(t, quick.push(t, "u1", "c1", m), "sr1")
		if o["server_row"].(map[string]any)["title"] != "after-lock" {
			t.Fatalf("retried mutation: %v", o)
		}
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.mutation WHERE client_id = 'c1' AND mutation_id = 'sr1' AND outcome ->> 'status' = 'applied'`); n != 1 {
			t.Fatal("the applied retry was not recorded")
		}
		// Replays return the recorded outcome.
		again := applied(t, quick.push(t, "u1", "c1", m), "sr1")
		if mustMarshal(t, again) != mustMarshal(t, o) {
			t.Fatalf("replay %v differs from %v", again, o)
		}
	})
}

// TestSyncEndpointPushBeforeStreamStart: before any worker has started the
// capture stream, a push is refused with 503 not_ready and writes nothing (no
// row, mutation record or fence): a write committed before the stream's start is
// never decoded, so its fence would hold the client's pulls at capture_pending
// for good. Once the stream exists the same push applies and is captured.
func TestSyncEndpointPushBeforeStreamStart(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, syncSchema)
	e := &syncEnv{d: d, cfg: workerConfig(d, "late"), url: serveSync(t, d)}
	e.connect(t, "u1", "c1")
	m := mut("early", "docs", "insert", map[string]any{"id": "d-early"}, map[string]any{"owner_id": "u1", "title": "t"})
	r := e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": []any{m}})
	requireError(t, "push before the stream starts", r, http.StatusServiceUnavailable, "not_ready")
	if ra := r.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q", ra)
	}
	if n := queryInt(t, d, `SELECT (SELECT count(*) FROM app.docs) + (SELECT count(*) FROM synchro.mutation) + (SELECT count(*) FROM synchro.fence)`); n != 0 {
		t.Fatalf("a refused push left %d rows, mutation records and fences", n)
	}

	e.w = startStreaming(t, d, e.cfg)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	if st, _ := outcome(t, e.push(t, "u1", "c1", m), "early"); st != "accepted" {
		t.Fatalf("push once the stream exists: %s", st)
	}
	waitMaterialized(t, d)
	r1 := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r1)
	if _, ok := r1.rows["user:u1"][rowKey("docs", map[string]any{"id": "d-early"})]; !ok {
		t.Fatalf("the pushed row was not captured: %v", r1.rows)
	}
}

// TestSyncEndpointCaptureGate: while capture lags (the worker is stopped, its
// heartbeat a streaming worker's), a client with an
// accepted push is refused pull and rebuild with 503 capture_pending and
// Retry-After (other clients are served), which change nothing: its
// scope_set_version, scope assignment epochs and scope set stay as they were
// although its assignment changed meanwhile, and the answer carries no cursor,
// so its cursors stay the ones to resume from; when readiness fails every
// client is refused with 503 not_ready, changing nothing either; once the
// worker runs again the pull with the cursors held before succeeds and delivers
// the pushed version (read-your-writes).
func TestSyncEndpointCaptureGate(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d1', 'u1', 'one')`)
	fast := e.epServer(t, func(s *httpapi.Sync) {
		s.CaptureWait = 50 * time.Millisecond
		s.ReadinessInterval = time.Nanosecond // every request asks synchro.is_ready
	})
	e.connect(t, "u1", "c1")
	e.connect(t, "u1", "c2")
	r1, r2 := newReplica(), newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r1)
	e.rebuildScope(t, "u1", "c2", "user:u1", 100, r2)
	pullReq := func(client string, r *replica) map[string]any {
		scopes := map[string]any{}
		for s, c := range r.cursors {
			scopes[s] = map[string]any{"cursor": c}
		}
		return map[string]any{"client_id": client, "scopes": scopes}
	}

	e.pauseCapture(t)
	resp := fast.push(t, "u1", "c1", mut("cg1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "zz-pending-zz"}))
	_, o := outcome(t, resp, "cg1")
	if o["status"] != "applied" {
		t.Fatalf("push while the worker is stopped: %v", o)
	}
	version := o["server_version"].(string)
	// The assignment changes: a pull served now would add the scope, move
	// scope_set_version and give the scope an epoch.
	e.d.Exec(t, `SELECT synchro.register_shared_scope('news')`)
	clientState := func() string {
		return queryText(t, e.d, `SELECT scope_set::text || ' ' || scope_set_version || ' ' || scope_epoch::text FROM synchro.client WHERE client_id = 'c1'`)
	}
	stateBefore, cursorsBefore := clientState(), maps.Clone(r1.cursors)
	requireUnchanged := func(what string, r reply) {
		t.Helper()
		if got := clientState(); got != stateBefore {
			t.Fatalf("%s: client c1 is %s, was %s", what, got, stateBefore)
		}
		for _, field := range []string{"scope_cursors", "cursor", "final_scope_cursor", "scope_set_version", "scope_updates"} {
			if _, ok := r.Body[field]; ok {
				t.Fatalf("%s: the refusal carries %s: %s", what, field, r.Raw)
			}
		}
	}
	for _, c := range []struct {
		what, path string
		body       map[string]any
	}{
		{"pull with a pending push", "/sync/pull", pullReq("c1", r1)},
		{"rebuild with a pending push", "/sync/rebuild", map[string]any{"client_id": "c1", "scope": "user:u1"}},
	} {
		r := fast.post(t, "u1", c.path, c.body)
		epRequireError(t, c.what, r, http.StatusServiceUnavailable, "capture_pending", "zz-pending-zz")
		requireUnchanged(c.what, r)
	}
	if ra := fast.post(t, "u1", "/sync/pull", pullReq("c1", r1)).Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q", ra)
	}
	// Another client of the same user has nothing pending: served, without the
	// change that is not captured yet.
	page := requireOK(t, "pull of another client", fast.post(t, "u1", "/sync/pull", pullReq("c2", r2)))
	if n := len(page["changes"].([]any)); n != 0 {
		t.Fatalf("uncaptured changes served: %v", page["changes"])
	}
	// Readiness fails (the heartbeat is older than the limit): everyone is refused.
	configureReadiness(t, e.d, `'1 millisecond'`, `1073741824`, `'60 seconds'`)
	epRequireError(t, "pull while not ready", fast.post(t, "u1", "/sync/pull", pullReq("c2", r2)), http.StatusServiceUnavailable, "not_ready")
	notReady := fast.post(t, "u1", "/sync/pull", pullReq("c1", r1))
	epRequireError(t, "pull while not ready", notReady, http.StatusServiceUnavailable, "not_ready")
	requireUnchanged("pull while not ready", notReady)
	epRequireError(t, "rebuild while not ready", fast.post(t, "u1", "/sync/rebuild", map[string]any{"client_id": "c2", "scope": "user:u1"}),
		http.StatusServiceUnavailable, "not_ready")
	// Push and connect do not depend on capture.
	fast.connect(t, "u1", "c2")

	configureReadiness(t, e.d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	e.w = startStreaming(t, e.d, e.cfg)
	var body map[string]any
	waitFor(t, "pull after capture resumed", 30*time.Second, func() (bool, error) {
		r := fast.post(t, "u1", "/sync/pull", pullReq("c1", r1))
		if r.Status == http.StatusServiceUnavailable && (r.errorCode() == "capture_pending" || r.errorCode() == "not_ready") {
			return false, nil
		}
		body = requireOK(t, "pull after capture resumed", r)
		return true, nil
	})
	if !maps.Equal(r1.cursors, cursorsBefore) {
		t.Fatalf("cursors %v, held %v before the refusals", r1.cursors, cursorsBefore)
	}
	// The cursor held before the refusals still resumes user:u1 (no rebuild).
	if rb := epStrings(body["rebuild"]); slices.Contains(rb, "user:u1") {
		t.Fatalf("pull after capture resumed asks to rebuild user:u1: %v", rb)
	}
	r1.apply(t, body)
	if body["has_more"] != false {
		e.pullAll(t, "u1", "c1", 500, r1)
	}
	got := r1.rows["user:u1"][rowKey("docs", map[string]any{"id": "d1"})]
	if got.Version != version || got.Row["title"] != "zz-pending-zz" {
		t.Fatalf("read-your-writes: pulled %v version %s, pushed version %s", got.Row, got.Version, version)
	}
	e.requireConverged(t, r1, "user:u1")
}
