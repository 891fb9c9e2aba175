package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// syncSchema is an application schema with every scope-rule kind:
//   - docs: column rule user:{owner_id};
//   - projects (dependency) and tasks: path rule tasks.project_id -> projects, user:{owner_id};
//   - notes with note_members (dependency): members rule, user:{user_id} per member;
//   - templates: shared scope templates_public, read-only.
const syncSchema = `
CREATE SCHEMA app;
CREATE TABLE app.docs (id text PRIMARY KEY, owner_id text NOT NULL, title text, n integer,
    data bytea, at timestamptz, meta jsonb, CHECK (n IS NULL OR n >= 0));
CREATE TABLE app.projects (id text PRIMARY KEY, owner_id text NOT NULL);
CREATE TABLE app.tasks (id bigint PRIMARY KEY, project_id text REFERENCES app.projects, title text);
CREATE TABLE app.notes (id text PRIMARY KEY, title text);
CREATE TABLE app.note_members (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    note_id text NOT NULL REFERENCES app.notes, user_id text NOT NULL);
CREATE TABLE app.templates (id integer PRIMARY KEY, name text);
SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}');
SELECT synchro.register_table('app.tasks', '{"kind":"path","path":["project_id"],"template":"user:{owner_id}"}');
SELECT synchro.register_table('app.notes', '{"kind":"members","relation":"app.note_members","template":"user:{user_id}"}');
SELECT synchro.register_table('app.templates', '{"kind":"shared","scope":"templates_public"}', '{"push_policy":"read_only"}');
SELECT synchro.register_shared_scope('templates_public');
`

// testJWTSecret signs the tokens of sync tests (HS256).
const testJWTSecret = "sync-tests-secret-0123456789abcdef"

// syncEnv is a database with syncSchema, a streaming worker, readiness limits
// and the HTTP API served over the service-role pool, authenticated by HS256.
type syncEnv struct {
	d   *testdb.DB
	cfg wal.Config
	w   *runningWorker
	url string
}

// pauseCapture stops the worker but keeps its heartbeat a streaming worker's, as
// when a live worker has not materialized the latest writes yet: readiness
// holds, for the heartbeat limit, while nothing more is materialized.
func (e *syncEnv) pauseCapture(t *testing.T) {
	t.Helper()
	if err := e.w.stop(t); err != nil {
		t.Fatalf("worker stopped with %v", err)
	}
	e.d.Exec(t, reportStreaming, e.cfg.WorkerID)
}

// newSyncEnv starts a syncEnv; setup (SQL, may be empty) runs once the worker
// streams, and is materialized before it returns.
func newSyncEnv(t *testing.T, setup string, tune ...func(*httpapi.Sync)) *syncEnv {
	t.Helper()
	return newSyncEnvOn(t, testdb.New(t), setup, tune...)
}

// newSyncEnvOn is newSyncEnv on the fresh database d (of a cluster of the
// test's own, say).
func newSyncEnvOn(t *testing.T, d *testdb.DB, setup string, tune ...func(*httpapi.Sync)) *syncEnv {
	t.Helper()
	d.Exec(t, syncSchema)
	cfg := workerConfig(d, "sync")
	w := startStreaming(t, d, cfg)
	if setup != "" {
		d.Exec(t, setup)
		waitMaterialized(t, d)
	}
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	e := &syncEnv{d: d, cfg: cfg, w: w, url: serveSync(t, d, tune...)}
	waitCaptureReady(t, d)
	return e
}

// waitCaptureReady waits until synchro.is_ready(), the answer the HTTP layer's
// capture gate serves pull and rebuild by (503 not_ready until then). A
// registry change (register_table, register_dependency) makes it false until
// the worker has activated the new generation in source order.
func waitCaptureReady(t *testing.T, d *testdb.DB) {
	t.Helper()
	waitFor(t, "capture ready", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(), `SELECT synchro.is_ready()`).Scan(&ok)
		return ok, err
	})
}

// serveSync serves the HTTP API of d over a service-role pool of 16
// connections with HS256 auth and the test defaults (5 s capture wait, 2 s push
// lock timeout), changed by tune, until the end of the test; it returns the
// base URL.
func serveSync(tb testing.TB, d *testdb.DB, tune ...func(*httpapi.Sync)) string {
	tb.Helper()
	return serveSyncPool(tb, d, 16, tune...)
}

// serveSyncPool is serveSync with a sync pool of poolSize connections; /readyz
// has a pool of its own, as in synchrod.
func serveSyncPool(tb testing.TB, d *testdb.DB, poolSize int32, tune ...func(*httpapi.Sync)) string {
	tb.Helper()
	srv := httptest.NewServer(syncRouter(tb, d, poolSize, tune...))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// syncRouter is the handler serveSyncPool serves.
func syncRouter(tb testing.TB, d *testdb.DB, poolSize int32, tune ...func(*httpapi.Sync)) http.Handler {
	tb.Helper()
	pool, err := httpapi.ServicePool(context.Background(), d.URL, poolSize)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	ops, err := httpapi.OpsPool(context.Background(), d.URL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ops.Close)
	authn, err := auth.New(auth.Config{Mode: auth.ModeJWT, HS256Secret: testJWTSecret})
	if err != nil {
		tb.Fatal(err)
	}
	s := &httpapi.Sync{Pool: pool, Auth: authn, Limits: httpapi.DefaultLimits, CaptureWait: 5 * time.Second,
		PushLockTimeout: 2 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, f := range tune {
		f(s)
	}
	return httpapi.NewRouter(httpapi.Deps{Pool: ops, Sync: s})
}

// token mints a valid token for user.
func token(t *testing.T, user string) string {
	t.Helper()
	tok, err := auth.MintHS256([]byte(testJWTSecret), "sub", user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// reply is one HTTP answer: status, headers and the body as JSON (Body) and raw.
type reply struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
}

// errorCode is the error.code of an error answer ("" for none).
func (r reply) errorCode() string {
	e, _ := r.Body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// post sends body (a Go value marshalled to JSON, or []byte / string sent as is)
// to path as user ("" = no Authorization header).
func (e *syncEnv) post(t *testing.T, user, path string, body any) reply {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, e.url+path, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+token(t, user))
	}
	return do(t, req)
}

// noRedirect is the tests' HTTP client: it never follows a redirect, so an
// answer is always the server's own (no sync endpoint redirects).
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// send sends req and returns the answer's status, headers and body as they came.
func send(tb testing.TB, req *http.Request) (int, http.Header, []byte) {
	tb.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, resp.Header, raw
}

func do(t *testing.T, req *http.Request) reply {
	t.Helper()
	status, header, raw := send(t, req)
	r := reply{Status: status, Header: header, Raw: raw}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		t.Fatalf("%s %s: answer %d is not a JSON object: %q", req.Method, req.URL.Path, status, raw)
	}
	if status != http.StatusOK && r.errorCode() == "" {
		t.Fatalf("%s %s: error answer %d without the error body: %s", req.Method, req.URL.Path, status, raw)
	}
	return r
}

// requireOK fails unless r is a 200.
func requireOK(t *testing.T, what string, r reply) map[string]any {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("%s: status %d, body %s", what, r.Status, r.Raw)
	}
	return r.Body
}

// requireError fails unless r is the error answer status/code.
func requireError(t *testing.T, what string, r reply, status int, code string) {
	t.Helper()
	if r.Status != status || r.errorCode() != code {
		t.Fatalf("%s: got %d %s (%s), want %d %s", what, r.Status, r.errorCode(), r.Raw, status, code)
	}
}

// connect connects client as user with no known scopes and returns the answer.
func (e *syncEnv) connect(t *testing.T, user, client string) map[string]any {
	t.Helper()
	return requireOK(t, "connect", e.post(t, user, "/sync/connect", map[string]any{
		"client_id": client, "protocol_version": 3, "platform": "test", "app_version": "1.0.0"}))
}

// mut builds one push mutation.
func mut(id, table, op string, pk, columns map[string]any) map[string]any {
	m := map[string]any{"mutation_id": id, "table": table, "op": op, "pk": pk}
	if columns != nil {
		m["columns"] = columns
	}
	return m
}

// push pushes mutations for client as user and returns the 200 answer.
func (e *syncEnv) push(t *testing.T, user, client string, mutations ...map[string]any) map[string]any {
	t.Helper()
	return requireOK(t, "push", e.post(t, user, "/sync/push", map[string]any{"client_id": client, "mutations": mutations}))
}

// outcome finds the outcome of mutation id in a push answer and its list
// ("accepted" or "rejected").
func outcome(t *testing.T, resp map[string]any, id string) (string, map[string]any) {
	t.Helper()
	for _, list := range []string{"accepted", "rejected"} {
		items, _ := resp[list].([]any)
		for _, it := range items {
			o := it.(map[string]any)
			if o["mutation_id"] == id {
				return list, o
			}
		}
	}
	t.Fatalf("no outcome for mutation %s in %v", id, resp)
	return "", nil
}

// replica is what a client holds after applying pulls and rebuilds: per scope,
// its rows by "table/pk" with checksum, and its cursor.
type replica struct {
	rows    map[string]map[string]replicaRow
	cursors map[string]any // scope -> cursor (string) or nil
}

type replicaRow struct {
	Row      map[string]any
	Version  string
	Checksum uint32
}

func newReplica() *replica {
	return &replica{rows: map[string]map[string]replicaRow{}, cursors: map[string]any{}}
}

func rowKey(table string, pk any) string {
	b, _ := json.Marshal(pk)
	return table + "/" + string(b)
}

// checksum is the sum mod 2^32 of the row checksums the replica holds for scope.
func (r *replica) checksum(scope string) string {
	var sum uint32
	for _, row := range r.rows[scope] {
		sum += row.Checksum
	}
	return strconv.FormatUint(uint64(sum), 10)
}

// rebuildScope pages a full rebuild of scope with page size limit into r and
// returns the final page.
func (e *syncEnv) rebuildScope(t *testing.T, user, client, scope string, limit int, r *replica) map[string]any {
	t.Helper()
	r.rows[scope] = map[string]replicaRow{}
	var cursor any
	for page := 0; ; page++ {
		if page > 100000 {
			t.Fatal("rebuild does not end")
		}
		body := requireOK(t, "rebuild", e.post(t, user, "/sync/rebuild",
			map[string]any{"client_id": client, "scope": scope, "cursor": cursor, "limit": limit}))
		for _, it := range body["records"].([]any) {
			rec := it.(map[string]any)
			r.rows[scope][rowKey(rec["table"].(string), rec["pk"])] = replicaRow{
				Row: rec["row"].(map[string]any), Version: rec["server_version"].(string),
				Checksum: uint32(rec["row_checksum"].(float64))}
		}
		if body["has_more"] == false {
			if got, want := r.checksum(scope), body["checksum"]; got != want {
				t.Fatalf("rebuild of %s: replica checksum %s, server checksum %v", scope, got, want)
			}
			r.cursors[scope] = body["final_scope_cursor"]
			return body
		}
		cursor = body["cursor"]
	}
}

// pullAll pulls the replica's scopes with page size limit until has_more is
// false, applying every page and checking its checksum rules (pagingPull); it
// returns the final page.
func (e *syncEnv) pullAll(t *testing.T, user, client string, limit int, r *replica) map[string]any {
	t.Helper()
	_, pages := e.pagingPull(t, user, client, limit, r)
	return pages[len(pages)-1]
}

// apply applies one pull page to the replica.
func (r *replica) apply(t *testing.T, body map[string]any) {
	t.Helper()
	if err := r.applyPage(body); err != nil {
		t.Fatal(err)
	}
}

// applyPage is apply for a goroutine other than the test's: it returns what
// is wrong with the page.
func (r *replica) applyPage(body map[string]any) error {
	for _, it := range body["changes"].([]any) {
		c := it.(map[string]any)
		scope := c["scope"].(string)
		if r.rows[scope] == nil {
			r.rows[scope] = map[string]replicaRow{}
		}
		k := rowKey(c["table"].(string), c["pk"])
		switch c["op"] {
		case "upsert":
			r.rows[scope][k] = replicaRow{Row: c["row"].(map[string]any), Version: c["server_version"].(string),
				Checksum: uint32(c["row_checksum"].(float64))}
		case "delete":
			delete(r.rows[scope], k)
		default:
			return fmt.Errorf("unknown op in %v", c)
		}
	}
	for s, c := range body["scope_cursors"].(map[string]any) {
		r.cursors[s] = c
	}
	return nil
}

// serverScope is the contents of scope at the materialized high-watermark, read
// from the database directly (each open membership edge's latest row version,
// as synchro.synced_row has it):
// "table/pk" -> row image.
func (e *syncEnv) serverScope(t *testing.T, scope string) map[string]map[string]any {
	t.Helper()
	rows, err := e.d.Pool.Query(context.Background(), `
		SELECT t.name, synchro.wire_pk(r.key_column, r.key_type, m.key), v.image
		FROM synchro.membership m
		JOIN synchro.progress p ON p.stream_generation = m.stream_generation
		JOIN synchro.synced_table t ON t.table_id = m.table_id
		JOIN synchro.relation r ON r.relation_id = t.relation_id
		JOIN LATERAL (SELECT v.image FROM synchro.row_version v
		              WHERE v.table_id = m.table_id AND v.key = m.key AND v.stream_generation = p.stream_generation
		              ORDER BY v.commit_lsn DESC, v.event_ordinal DESC LIMIT 1) v ON v.image IS NOT NULL
		WHERE m.scope = $1 AND m.to_lsn IS NULL`, scope)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]map[string]any{}
	for rows.Next() {
		var table string
		var pk, image map[string]any
		if err := rows.Scan(&table, &pk, &image); err != nil {
			t.Fatal(err)
		}
		out[rowKey(table, pk)] = image
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// requireConverged fails unless the replica's rows of scope equal the server's.
func (e *syncEnv) requireConverged(t *testing.T, r *replica, scope string) {
	t.Helper()
	want := e.serverScope(t, scope)
	got := map[string]map[string]any{}
	for k, row := range r.rows[scope] {
		got[k] = row.Row
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("scope %s: replica %s\nserver %s", scope, gotJSON, wantJSON)
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
