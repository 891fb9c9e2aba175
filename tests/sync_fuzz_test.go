package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// Fuzz targets of the sync endpoint bodies: whatever the body, the answer is a
// JSON object with the protocol's error body when it is not a 200, and never a
// 5xx. The seed corpus runs in plain `go test`; `go test -fuzz FuzzPush ./tests`
// explores further (each fuzz worker process sets up its own database).

// fuzzEnv is a syncEnv for fuzz targets: set up once per fuzz function (a
// *testing.F), with a connected client "fz" of user u1, real cursors for seeds,
// and a token of u1.
type fuzzEnv struct {
	*syncEnv
	token       string
	cursor      string // a scope cursor of user:u1
	tplCursor   string // a scope cursor of templates_public
	session     string // a rebuild session cursor of user:u1
	schemaHash  string
	schemaVer   float64
	otherClient string // a client of user u2
}

// fuzzPost posts body to path with the bearer token tok and returns the status,
// headers and raw answer.
func fuzzPost(tb testing.TB, url, tok string, body []byte) (int, http.Header, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return send(tb, req)
}

// fuzzJSON posts body and decodes a 200 answer.
func (e *fuzzEnv) fuzzJSON(tb testing.TB, path string, body any) map[string]any {
	tb.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	status, _, answer := fuzzPost(tb, e.url+path, e.token, raw)
	var v map[string]any
	if err := json.Unmarshal(answer, &v); err != nil || status != http.StatusOK {
		tb.Fatalf("%s: %d %s", path, status, answer)
	}
	return v
}

// newFuzzEnv starts the database, a worker and the HTTP API for a fuzz function.
func newFuzzEnv(f *testing.F) *fuzzEnv {
	f.Helper()
	ctx := context.Background()
	d := testdb.New(f)
	d.Exec(f, syncSchema)
	cfg := workerConfig(d, "fuzz")
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wal.New(cfg, d.Pool).Run(wctx) }()
	f.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			f.Error("worker did not stop within 30s")
		}
		d.DropSlot(f, cfg.Slot)
	})
	waitFor(f, "stream start", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM synchro.progress)`).Scan(&ok)
		return ok, err
	})
	d.Exec(f, `INSERT INTO app.docs (id, owner_id, title, n) VALUES ('d1', 'u1', 'one', 1), ('d2', 'u1', 'two', 2), ('b1', 'u2', 'theirs', 3);
		INSERT INTO app.projects VALUES ('p1', 'u1'); INSERT INTO app.tasks VALUES (1, 'p1', 'task');
		INSERT INTO app.notes VALUES ('n1', 'note'); INSERT INTO app.note_members (note_id, user_id) VALUES ('n1', 'u1');
		INSERT INTO app.templates VALUES (1, 'welcome')`)
	waitFor(f, "materialization", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM synchro.fence f WHERE NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id))`).Scan(&ok)
		return ok, err
	})
	d.Exec(f, `SELECT synchro.configure_readiness('10 seconds', 1073741824, '60 seconds', current_database())`)
	waitFor(f, "capture ready", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(ctx, `SELECT synchro.is_ready()`).Scan(&ok)
		return ok, err
	})
	// A long capture wait: a pull right after a fuzzed push waits for capture
	// rather than answering 503 on a loaded machine.
	url := serveSync(f, d, func(s *httpapi.Sync) { s.CaptureWait = 30 * time.Second })
	e := &fuzzEnv{syncEnv: &syncEnv{d: d, cfg: cfg, url: url}, otherClient: "fz-u2"}
	var err error
	if e.token, err = auth.MintHS256([]byte(testJWTSecret), "sub", "u1", 24*time.Hour, time.Now()); err != nil {
		f.Fatal(err)
	}
	tok2, err := auth.MintHS256([]byte(testJWTSecret), "sub", "u2", time.Hour, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	if status, _, raw := fuzzPost(f, e.url+"/sync/connect", tok2, []byte(`{"client_id":"fz-u2","protocol_version":3}`)); status != http.StatusOK {
		f.Fatalf("connect of u2: %d %s", status, raw)
	}
	conn := e.fuzzJSON(f, "/sync/connect", map[string]any{"client_id": "fz", "protocol_version": 3})
	sch := conn["schema"].(map[string]any)
	e.schemaHash, e.schemaVer = sch["hash"].(string), sch["version"].(float64)
	e.cursor = e.fuzzJSON(f, "/sync/rebuild", map[string]any{"client_id": "fz", "scope": "user:u1", "limit": 1000})["final_scope_cursor"].(string)
	e.tplCursor = e.fuzzJSON(f, "/sync/rebuild", map[string]any{"client_id": "fz", "scope": "templates_public"})["final_scope_cursor"].(string)
	e.session = e.fuzzJSON(f, "/sync/rebuild", map[string]any{"client_id": "fz", "scope": "user:u1", "limit": 1})["cursor"].(string)
	return e
}

// check posts one fuzzed body to path and fails on a 5xx, a non-JSON answer, an
// error answer without the error body, or an error answer quoting SQL.
func (e *fuzzEnv) check(t *testing.T, path string, body []byte) {
	status, header, raw := fuzzPost(t, e.url+path, e.token, body)
	if status >= 500 {
		t.Fatalf("%s answered %d to %q: %s", path, status, fuzzShort(body), raw)
	}
	// (UseNumber: an answer may echo a client's number beyond float64, e.g. a pk.)
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() || v == nil {
		t.Fatalf("%s answered %d with a non-JSON body to %q: %q (%v)", path, status, fuzzShort(body), fuzzShort(raw), err)
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s answered %d with Content-Type %q", path, status, ct)
	}
	if status != http.StatusOK {
		errBody, _ := v["error"].(map[string]any)
		if code, _ := errBody["code"].(string); code == "" {
			t.Fatalf("%s answered %d without the error body: %s", path, status, raw)
		}
		for _, s := range []string{"SELECT", "synchro.", "pg_", "SQLSTATE", "PL/pgSQL"} {
			if bytes.Contains(raw, []byte(s)) {
				t.Fatalf("%s answered %d quoting %q: %s", path, status, s, raw)
			}
		}
	}
}

func fuzzShort(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%s... (%d bytes)", b[:300], len(b))
	}
	return string(b)
}

// fuzzCommonSeeds are bodies every endpoint gets: not objects, malformed,
// deep, odd numbers and strings.
func fuzzCommonSeeds() []string {
	return []string{
		``, ` `, `null`, `[]`, `{}`, `""`, `0`, `-0`, `1e400`, `true`, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`,
		`{} {}`, `{}]`, `{}x`, "\xff", "{\"a\":\"\xc3\x28\"}", "{\"client_id\":\"\x00\"}", `{"client_id":"\u0000"}`,
		`{"client_id":"\ud800"}`, `{"client_id":"\udc00\ud800"}`, `{"client_id":"\ud83d\ude00"}`, `{"client_id":"\u00e9\u4e2d"}`,
		`{"client_id":"fz","x":` + epDepth(32) + `}`, `{"client_id":"fz","x":` + epDepth(31) + `}`,
		`{"x":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `}`,
		`{"client_id":1e400}`, `{"client_id":-0}`, `{"client_id":["fz"]}`, `{"client_id":{"a":1}}`, `{"client_id":null}`,
		`{"client_id":"` + strings.Repeat("x", 300) + `"}`, `{"client_id":"fz","client_id":"other"}`,
		`{"client_id":"` + strings.Repeat("\\u00e9", 200) + `"}`,
		`{"client_id":"fz-u2"}`, `{"client_id":"never-connected"}`,
		`{"client_id":"fz","schema":{"hash":"bogus","version":1}}`, `{"client_id":"fz","schema":{"version":1e400}}`,
		`{"client_id":"fz","schema":{"version":-0,"hash":""}}`, `{"client_id":"fz","schema":"x"}`,
	}
}

// FuzzConnect: POST /sync/connect never answers 5xx or a non-JSON body.
func FuzzConnect(f *testing.F) {
	e := newFuzzEnv(f)
	for _, s := range fuzzCommonSeeds() {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"client_id":"fz","protocol_version":3,"platform":"ios","app_version":"1.4.0"}`,
		`{"client_id":"fz2","protocol_version":3}`,
		fmt.Sprintf(`{"client_id":"fz","protocol_version":3,"schema":{"version":%v,"hash":%q},"scope_set_version":1,"known_scopes":{"user:u1":{"cursor":%q},"templates_public":{"cursor":%q}}}`,
			e.schemaVer, e.schemaHash, e.cursor, e.tplCursor),
		fmt.Sprintf(`{"client_id":"fz","protocol_version":3,"known_scopes":{"user:u1":{"cursor":%q},"user:u2":{"cursor":%q}}}`, e.tplCursor, e.cursor),
		`{"client_id":"fz","protocol_version":3,"known_scopes":{"user:u1":{"cursor":"garbage"},"x":null,"y":{}}}`,
		`{"client_id":"fz","protocol_version":3,"known_scopes":{"user:u1":{"cursor":"\ud800.\udc00"}}}`,
		`{"client_id":"fz","protocol_version":3,"known_scopes":{"user:u1":{"cursor":1}}}`,
		`{"client_id":"fz","protocol_version":3,"known_scopes":[]}`,
		`{"client_id":"fz","protocol_version":3,"schema":{"hash":"bogus"}}`,
		`{"client_id":"fz","protocol_version":2}`, `{"client_id":"fz","protocol_version":0}`, `{"client_id":"fz","protocol_version":-1}`,
		`{"client_id":"fz","protocol_version":9223372036854775807}`, `{"client_id":"fz","protocol_version":-9223372036854775808}`,
		`{"client_id":"fz","protocol_version":9223372036854775808}`, `{"client_id":"fz","protocol_version":3.0}`,
		`{"client_id":"fz","protocol_version":3e0}`, `{"client_id":"fz","protocol_version":"3"}`, `{"client_id":"fz","protocol_version":null}`,
		`{"client_id":"fz","protocol_version":1e400}`, `{"client_id":"fz","protocol_version":-0}`,
		`{"client_id":"fz","protocol_version":3,"app_version":"` + strings.Repeat("9", 250) + `"}`,
		`{"client_id":"fz","protocol_version":3,"app_version":"1.` + strings.Repeat("9", 5000) + `"}`,
		`{"client_id":"fz","protocol_version":3,"app_version":"1..2"}`, `{"client_id":"fz","protocol_version":3,"app_version":"-1"}`,
		`{"client_id":"fz","protocol_version":3,"app_version":"１.０"}`, `{"client_id":"fz","protocol_version":3,"app_version":5}`,
		`{"client_id":"fz","protocol_version":3,"platform":"` + strings.Repeat("p", 100) + `"}`,
		`{"client_id":"fz","protocol_version":3,"scope_set_version":1e400}`, `{"client_id":"fz","protocol_version":3,"scope_set_version":-1}`,
		`{"client_id":"fz-u2","protocol_version":3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { e.check(t, "/sync/connect", body) })
}

// FuzzPush: POST /sync/push never answers 5xx or a non-JSON body.
func FuzzPush(f *testing.F) {
	e := newFuzzEnv(f)
	for _, s := range fuzzCommonSeeds() {
		f.Add([]byte(s))
	}
	push := func(muts ...string) string {
		return `{"client_id":"fz","batch_id":"b","mutations":[` + strings.Join(muts, ",") + `]}`
	}
	m := func(id, table, op, pk, cols string) string {
		s := fmt.Sprintf(`{"mutation_id":%q,"table":%q,"op":%q,"pk":%s`, id, table, op, pk)
		if cols != "" {
			s += `,"columns":` + cols
		}
		return s + "}"
	}
	many := make([]string, 501)
	for i := range many {
		many[i] = m(fmt.Sprintf("many%d", i), "docs", "update", `{"id":"d1"}`, `{"n":1}`)
	}
	for _, s := range []string{
		push(),
		push(m("a1", "docs", "insert", `{"id":"f1"}`, `{"owner_id":"u1","title":"t","n":1,"data":"AQI=","at":"2026-03-20T18:22:11Z","meta":{"a":[1,"x"]}}`)),
		push(m("a2", "docs", "update", `{"id":"d1"}`, `{"title":"u"}`)),
		push(m("a3", "docs", "upsert", `{"id":"f2"}`, `{"owner_id":"u1"}`)),
		push(m("a4", "docs", "delete", `{"id":"d2"}`, ``)),
		push(`{"mutation_id":"a5","table":"docs","op":"update","pk":{"id":"d1"},"base_version":"stale","columns":{"title":"x"}}`),
		push(`{"mutation_id":"a6","table":"docs","op":"update","pk":{"id":"d1"},"base_version":null,"columns":{"title":"x"}}`),
		push(m("a7", "tasks", "insert", `{"id":2}`, `{"project_id":"p1","title":"t"}`)),
		push(m("a8", "tasks", "insert", `{"id":9223372036854775807}`, `{"project_id":"p1"}`)),
		push(m("a9", "tasks", "insert", `{"id":9223372036854775808}`, `{"project_id":"p1"}`)),
		push(m("a10", "tasks", "insert", `{"id":-9223372036854775809}`, `{"project_id":"p1"}`)),
		push(m("a11", "tasks", "delete", `{"id":-0}`, ``)), push(m("a12", "tasks", "delete", `{"id":1e400}`, ``)),
		push(m("a13", "tasks", "delete", `{"id":1.0}`, ``)), push(m("a14", "tasks", "delete", `{"id":1e2}`, ``)),
		push(m("a15", "tasks", "insert", `{"id":3}`, `{"project_id":"nowhere"}`)),
		push(m("a16", "templates", "insert", `{"id":5}`, `{"name":"x"}`)),
		push(m("a17", "notes", "update", `{"id":"n1"}`, `{"title":"x"}`)),
		push(m("a18", "note_members", "insert", `{"id":1}`, `{"note_id":"n1","user_id":"u1"}`)),
		push(m("a19", "nope", "insert", `{"id":"x"}`, `{}`)),
		push(m("a20", "docs", "merge", `{"id":"d1"}`, `{}`)),
		push(m("a21", "docs", "update", `{"id":"b1"}`, `{"title":"x"}`)),
		push(m("a22", "docs", "insert", `{"id":"b1"}`, `{"owner_id":"u1"}`)),
		push(m("a23", "docs", "update", `{"id":"d1"}`, `{"owner_id":"u2"}`)),
		push(m("a24", "docs", "update", `{"id":"d1"}`, `{"n":-1}`)), push(m("a25", "docs", "update", `{"id":"d1"}`, `{"n":"x"}`)),
		push(m("a26", "docs", "update", `{"id":"d1"}`, `{"n":1e400}`)), push(m("a27", "docs", "update", `{"id":"d1"}`, `{"n":1e200000}`)),
		push(m("a28", "docs", "update", `{"id":"d1"}`, `{"n":1e-400}`)), push(m("a29", "docs", "update", `{"id":"d1"}`, `{"n":-0}`)),
		push(m("a30", "docs", "update", `{"id":"d1"}`, `{"n":2147483648}`)), push(m("a31", "docs", "update", `{"id":"d1"}`, `{"n":[1]}`)),
		push(m("a32", "docs", "update", `{"id":"d1"}`, `{"n":{"a":1}}`)), push(m("a33", "docs", "update", `{"id":"d1"}`, `{"n":true}`)),
		push(m("a34", "docs", "update", `{"id":"d1"}`, `{"data":"!!"}`)), push(m("a35", "docs", "update", `{"id":"d1"}`, `{"data":5}`)),
		push(m("a36", "docs", "update", `{"id":"d1"}`, `{"data":"\\x00"}`)), push(m("a37", "docs", "update", `{"id":"d1"}`, `{"data":{"a":1}}`)),
		push(m("a38", "docs", "update", `{"id":"d1"}`, `{"at":"infinity"}`)), push(m("a39", "docs", "update", `{"id":"d1"}`, `{"at":"-infinity"}`)),
		push(m("a40", "docs", "update", `{"id":"d1"}`, `{"at":"4713-01-01 BC"}`)), push(m("a41", "docs", "update", `{"id":"d1"}`, `{"at":"2026-13-45"}`)),
		push(m("a42", "docs", "update", `{"id":"d1"}`, `{"at":12}`)), push(m("a43", "docs", "update", `{"id":"d1"}`, `{"at":"294277-01-01"}`)),
		push(m("a44", "docs", "update", `{"id":"d1"}`, `{"meta":"\ud800"}`)), push(m("a45", "docs", "update", `{"id":"d1"}`, `{"meta":{"\u0000":1}}`)),
		push(m("a46", "docs", "update", `{"id":"d1"}`, `{"meta":`+epDepth(26)+`}`)), push(m("a47", "docs", "update", `{"id":"d1"}`, `{"meta":null}`)),
		push(m("a48", "docs", "update", `{"id":"d1"}`, `{"title":"`+strings.Repeat("long ", 20000)+`"}`)),
		push(m("a49", "docs", "update", `{"id":"d1"}`, `{"title":"\ud83d\ude00 \u00e9 \\ \" \/ \b\f\n\r\t"}`)),
		push(m("a50", "docs", "update", `{"id":"d1"}`, `{"owner_id":null}`)), push(m("a51", "docs", "update", `{"id":"d1"}`, `{"id":"d9"}`)),
		push(m("a52", "docs", "update", `{"id":"d1"}`, `{}`)), push(m("a53", "docs", "update", `{"id":"d1"}`, `{"nope":1}`)),
		push(m("a54", "docs", "update", `{"id":"d1"}`, `[]`)), push(m("a55", "docs", "update", `{"id":"d1"}`, `"x"`)),
		push(m("a56", "docs", "update", `{"id":"d1","x":1}`, `{"title":"x"}`)), push(m("a57", "docs", "update", `{}`, `{"title":"x"}`)),
		push(m("a58", "docs", "update", `{"id":null}`, `{"title":"x"}`)), push(m("a59", "docs", "update", `{"id":["d1"]}`, `{"title":"x"}`)),
		push(m("a60", "docs", "update", `[]`, `{"title":"x"}`)), push(m("a61", "docs", "update", `null`, `{"title":"x"}`)),
		push(m("a62", "docs", "insert", `{"id":"\ud800"}`, `{"owner_id":"u1"}`)), push(m("a63", "docs", "insert", `{"id":""}`, `{"owner_id":"u1"}`)),
		push(m("a64", "docs", "insert", `{"id":"`+strings.Repeat("k", 3000)+`"}`, `{"owner_id":"u1"}`)),
		push(m("a65", "docs", "insert", `{"id":"f3"}`, `{"owner_id":"`+strings.Repeat("u", 300)+`"}`)),
		push(m("a1", "docs", "insert", `{"id":"f1"}`, `{"owner_id":"u1"}`), m("a1", "docs", "delete", `{"id":"f1"}`, ``)),
		push(m("", "docs", "delete", `{"id":"d1"}`, ``)), push(m("a66", "", "delete", `{"id":"d1"}`, ``)),
		push(`{"mutation_id":"a67","table":"docs","op":"delete","pk":{"id":"d1"},"base_version":5}`),
		push(`"m"`), push(`null`), push(`[]`),
		`{"client_id":"fz","mutations":null}`, `{"client_id":"fz","mutations":{}}`, `{"client_id":"fz","batch_id":7,"mutations":[]}`,
		`{"client_id":"fz","mutations":[` + strings.Join(many, ",") + `]}`,
		`{"client_id":"fz","schema":{"hash":"bogus"},"mutations":[]}`,
		fmt.Sprintf(`{"client_id":"fz","schema":{"hash":%q,"version":%v},"mutations":[]}`, e.schemaHash, e.schemaVer),
		`{"client_id":"fz-u2","mutations":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { e.check(t, "/sync/push", body) })
}

// FuzzPull: POST /sync/pull never answers 5xx or a non-JSON body.
func FuzzPull(f *testing.F) {
	e := newFuzzEnv(f)
	for _, s := range fuzzCommonSeeds() {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"client_id":"fz"}`,
		fmt.Sprintf(`{"client_id":"fz","scopes":{"user:u1":{"cursor":%q},"templates_public":{"cursor":%q}},"limit":1}`, e.cursor, e.tplCursor),
		fmt.Sprintf(`{"client_id":"fz","scopes":{"user:u1":{"cursor":%q}},"limit":500,"scope_set_version":1}`, e.cursor),
		fmt.Sprintf(`{"client_id":"fz","scopes":{"user:u1":{"cursor":%q}}}`, e.tplCursor),
		fmt.Sprintf(`{"client_id":"fz","scopes":{"user:u1":{"cursor":%q}}}`, e.session),
		fmt.Sprintf(`{"client_id":"fz","scopes":{"user:u2":{"cursor":%q}}}`, e.cursor),
		fmt.Sprintf(`{"client_id":"fz","scopes":{"user:u1":{"cursor":%q}}}`, e.cursor[:len(e.cursor)-2]+"AA"),
		fmt.Sprintf(`{"client_id":"fz","scopes":{"user:u1":{"cursor":%q}}}`, strings.Replace(e.cursor, ".", "", 1)),
		`{"client_id":"fz","scopes":{"user:u1":{"cursor":null},"templates_public":{},"x":null}}`,
		`{"client_id":"fz","scopes":{"user:u1":{"cursor":"garbage"}}}`, `{"client_id":"fz","scopes":{"user:u1":{"cursor":"a.b"}}}`,
		`{"client_id":"fz","scopes":{"user:u1":{"cursor":"e30.AAAA"}}}`, `{"client_id":"fz","scopes":{"user:u1":{"cursor":"WyJjIl0.AAAA"}}}`,
		`{"client_id":"fz","scopes":{"user:u1":{"cursor":"` + strings.Repeat("A", 4096) + `"}}}`,
		`{"client_id":"fz","scopes":{"user:u1":{"cursor":"` + strings.Repeat("A", 4097) + `"}}}`,
		`{"client_id":"fz","scopes":{"user:u1":{"cursor":5}}}`, `{"client_id":"fz","scopes":["user:u1"]}`, `{"client_id":"fz","scopes":null}`,
		`{"client_id":"fz","scopes":{"":{"cursor":null}}}`, `{"client_id":"fz","scopes":{"\ud800":{"cursor":null}}}`,
		`{"client_id":"fz","limit":0}`, `{"client_id":"fz","limit":-1}`, `{"client_id":"fz","limit":1000000}`, `{"client_id":"fz","limit":"5"}`,
		`{"client_id":"fz","limit":1e400}`, `{"client_id":"fz","limit":-0}`, `{"client_id":"fz","limit":2.5}`,
		`{"client_id":"fz","limit":9223372036854775807}`, `{"client_id":"fz","limit":2147483648}`,
		`{"client_id":"fz","scope_set_version":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { e.check(t, "/sync/pull", body) })
}

// FuzzRebuild: POST /sync/rebuild never answers 5xx or a non-JSON body.
func FuzzRebuild(f *testing.F) {
	e := newFuzzEnv(f)
	for _, s := range fuzzCommonSeeds() {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"client_id":"fz","scope":"user:u1"}`, `{"client_id":"fz","scope":"user:u1","cursor":null,"limit":1}`,
		`{"client_id":"fz","scope":"templates_public","limit":1000}`,
		fmt.Sprintf(`{"client_id":"fz","scope":"user:u1","cursor":%q,"limit":1}`, e.session),
		fmt.Sprintf(`{"client_id":"fz","scope":"templates_public","cursor":%q}`, e.session),
		fmt.Sprintf(`{"client_id":"fz","scope":"user:u1","cursor":%q}`, e.cursor),
		fmt.Sprintf(`{"client_id":"fz","scope":"user:u1","cursor":%q}`, e.session[:len(e.session)-1]),
		fmt.Sprintf(`{"client_id":"fz","scope":"user:u1","cursor":%q,"schema":{"hash":%q}}`, e.session, e.schemaHash),
		`{"client_id":"fz","scope":"user:u2"}`, `{"client_id":"fz","scope":"nope"}`, `{"client_id":"fz","scope":""}`,
		`{"client_id":"fz","scope":"` + strings.Repeat("s", 257) + `"}`, `{"client_id":"fz","scope":5}`, `{"client_id":"fz","scope":null}`,
		`{"client_id":"fz","scope":"user:u1","cursor":"garbage"}`, `{"client_id":"fz","scope":"user:u1","cursor":""}`,
		`{"client_id":"fz","scope":"user:u1","cursor":"WyJyIiwiYSIsImIiLCJjIiwiZCIsImUiXQ.AAAAAAAAAAAAAAAAAAAAAA"}`,
		`{"client_id":"fz","scope":"user:u1","cursor":5}`, `{"client_id":"fz","scope":"user:u1","cursor":"` + strings.Repeat("A", 5000) + `"}`,
		`{"client_id":"fz","scope":"user:u1","limit":0}`, `{"client_id":"fz","scope":"user:u1","limit":-7}`,
		`{"client_id":"fz","scope":"user:u1","limit":"1"}`, `{"client_id":"fz","scope":"user:u1","limit":1e400}`,
		`{"client_id":"fz","scope":"user:u1","limit":99999999999}`, `{"client_id":"fz","scope":"\ud800"}`,
		`{"client_id":"fz","scope":"user:u1","schema":{"hash":"bogus"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { e.check(t, "/sync/rebuild", body) })
}
