package client

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testManifest has one table with every kind of conversion.
const testManifest = `{"version": 1, "hash": "h1", "tables": [
  {"name": "items", "primary_key": ["id"], "columns": [
    {"name": "id", "type": "string", "nullable": false},
    {"name": "n", "type": "int64", "nullable": true},
    {"name": "done", "type": "boolean", "nullable": true},
    {"name": "data", "type": "bytes", "nullable": true},
    {"name": "meta", "type": "json", "nullable": true}]},
  {"name": "nums", "primary_key": ["id"], "columns": [
    {"name": "id", "type": "int64", "nullable": false},
    {"name": "v", "type": "string", "nullable": true}]}]}`

// openLocal opens a client whose server is not needed, with the test schema.
func openLocal(t *testing.T) *Client {
	t.Helper()
	ctx := context.Background()
	c, err := Open(ctx, filepath.Join(t.TempDir(), "local.sqlite"), Config{ServerURL: "http://127.0.0.1:1", ClientID: "unit"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m, err := parseManifest([]byte(testManifest))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.installSchema(ctx, m, false); err != nil {
		t.Fatal(err)
	}
	return c
}

func mustExec(t *testing.T, c *Client, q string, args ...any) {
	t.Helper()
	if _, err := c.DB().Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// entry is one queue row.
type entry struct {
	Op, PK, Columns, Base string
	Sent                  bool
}

func queue(t *testing.T, c *Client) []entry {
	t.Helper()
	rows, err := c.DB().Query(`SELECT op, pk, coalesce(columns, ''), coalesce(base_version, ''), sent FROM _synchro_queue ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []entry
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.Op, &e.PK, &e.Columns, &e.Base, &e.Sent); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func requireQueue(t *testing.T, c *Client, want ...entry) {
	t.Helper()
	got := queue(t, c)
	if len(got) != len(want) {
		t.Fatalf("queue %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if w.Columns == "" {
			g.Columns = "" // not compared
		}
		if g != w {
			t.Fatalf("queue entry %d: %+v, want %+v", i, got[i], w)
		}
	}
}

// serverRow applies a row state delivered for scope, as a pull page would.
func serverRow(t *testing.T, c *Client, scope, id, row, version string, checksum uint32) {
	t.Helper()
	err := c.apply(context.Background(), func(a *applier) error {
		tb := a.m.byName["items"]
		k, err := a.key(tb, json.RawMessage(`{"id":"`+id+`"}`))
		if err != nil {
			return err
		}
		if row == "" {
			return a.remove(scope, tb, k)
		}
		return a.upsert(scope, tb, k, json.RawMessage(row), version, checksum)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setCursor records a scope's cursor, as a pull or rebuild would.
func setCursor(t *testing.T, c *Client, scope, cursor string) {
	t.Helper()
	if err := c.apply(context.Background(), func(a *applier) error { return a.setCursor(scope, &cursor) }); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, c *Client, q string, args ...any) int {
	t.Helper()
	var n int
	if err := c.DB().QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCapture: local writes are queued and merged per row; rows applied from
// the server are not; a change made while a batch is in flight gets its own
// entry, whose base version follows the batch's outcome.
func TestCapture(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()

	mustExec(t, c, `INSERT INTO items (id, n) VALUES ('a', 1)`)
	mustExec(t, c, `UPDATE items SET n = 2 WHERE id = 'a'`)
	requireQueue(t, c, entry{Op: "upsert", PK: `{"id":"a"}`, Columns: `{"n":2,"done":null,"data":null,"meta":null}`})
	mustExec(t, c, `DELETE FROM items WHERE id = 'a'`)
	requireQueue(t, c) // the server never had it

	serverRow(t, c, "s1", "b", `{"id":"b","n":5,"done":true,"data":"AQI=","meta":{"k":[1,"x"]}}`, "v1", 10)
	requireQueue(t, c)
	var n int64
	var done int
	var data []byte
	var meta string
	if err := c.DB().QueryRow(`SELECT n, done, data, meta FROM items WHERE id = 'b'`).Scan(&n, &done, &data, &meta); err != nil {
		t.Fatal(err)
	}
	if n != 5 || done != 1 || string(data) != "\x01\x02" || meta != `{"k":[1,"x"]}` {
		t.Fatalf("applied row: %d %d %q %s", n, done, data, meta)
	}

	mustExec(t, c, `UPDATE items SET done = 0, data = x'ff' WHERE id = 'b'`)
	requireQueue(t, c, entry{Op: "update", PK: `{"id":"b"}`, Base: "v1"})
	batch, err := c.nextBatch(ctx, 1<<62)
	if err != nil || len(batch) != 1 {
		t.Fatalf("batch %+v, %v", batch, err)
	}
	m := batch[0].m
	if got := mustJSON(t, m.Columns); got != `{"data":"/w==","done":false,"meta":{"k":[1,"x"]},"n":5}` {
		t.Fatalf("wire columns %s", got)
	}
	if m.BaseVersion == nil || *m.BaseVersion != "v1" || string(m.PK) != `{"id":"b"}` || m.Op != "update" {
		t.Fatalf("mutation %+v", m)
	}

	// In flight: a new change gets its own entry; the batch stays as it was.
	mustExec(t, c, `UPDATE items SET n = 6 WHERE id = 'b'`)
	requireQueue(t, c, entry{Op: "update", PK: `{"id":"b"}`, Base: "v1", Sent: true}, entry{Op: "update", PK: `{"id":"b"}`, Base: "v1"})
	var rep Report
	err = c.apply(ctx, func(a *applier) error {
		_, err := pushApplier{a}.outcomes(batch, []outcome{{MutationID: m.MutationID, Status: "applied", ServerVersion: ptr("v2"),
			ServerRow: json.RawMessage(`{"id":"b","n":5,"done":false,"data":"/w==","meta":{"k":[1,"x"]}}`)}}, &rep)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	requireQueue(t, c, entry{Op: "update", PK: `{"id":"b"}`, Base: "v2"})
	if got := count(t, c, `SELECT n FROM items WHERE id = 'b'`); got != 6 {
		t.Fatalf("the applied answer overwrote a newer local change: n = %d", got)
	}

	// A delete merges into the queued update; a changed key is a delete and an insert.
	mustExec(t, c, `DELETE FROM items WHERE id = 'b'`)
	requireQueue(t, c, entry{Op: "delete", PK: `{"id":"b"}`, Base: "v2"})
	mustExec(t, c, `INSERT INTO items (id) VALUES ('c')`)
	mustExec(t, c, `UPDATE items SET id = 'd' WHERE id = 'c'`)
	requireQueue(t, c, entry{Op: "delete", PK: `{"id":"b"}`, Base: "v2"}, entry{Op: "upsert", PK: `{"id":"d"}`})
}

func ptr(s string) *string { return &s }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMultiScope: a row held by two scopes stays until neither holds it, and
// the scope checksums count it in both.
func TestMultiScope(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	serverRow(t, c, "s1", "x", `{"id":"x","n":1}`, "v1", 4000000000)
	serverRow(t, c, "s2", "x", `{"id":"x","n":1}`, "v1", 4000000000)
	serverRow(t, c, "s1", "y", `{"id":"y","n":2}`, "v1", 500000000)
	if err := c.apply(ctx, func(a *applier) error {
		return errors.Join(a.addScope("s1"), a.addScope("s2"))
	}); err != nil {
		t.Fatal(err)
	}
	scopes, err := c.Scopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(scopes) != 2 || scopes[0].Checksum != uint32((4000000000+500000000)%(1<<32)) || scopes[1].Rows != 1 {
		t.Fatalf("scopes %+v", scopes)
	}
	serverRow(t, c, "s1", "x", "", "", 0)
	if got := count(t, c, `SELECT count(*) FROM items WHERE id = 'x'`); got != 1 {
		t.Fatal("a row another scope holds was deleted")
	}
	if err := c.apply(ctx, func(a *applier) error { return a.dropScope("s2") }); err != nil {
		t.Fatal(err)
	}
	if got := count(t, c, `SELECT count(*) FROM items WHERE id = 'x'`); got != 0 {
		t.Fatal("a row no scope holds was kept")
	}
	if got := count(t, c, `SELECT count(*) FROM _synchro_images WHERE pk = '{"id":"x"}'`); got != 0 {
		t.Fatal("the image of a row no scope holds was kept")
	}
	if got := count(t, c, `SELECT count(*) FROM items`); got != 1 {
		t.Fatalf("%d rows left, want y only", got)
	}
	requireQueue(t, c)
}

// TestStaleImageRebuildsScope: scope s2 holds row x at its newer version v2
// (s2 was rebuilt at a later position than s1's cursor) when a pull delivers s1's
// older upsert of x (v1) and then x leaving s1. The image is then v1 while s2
// holds v2; at the final page s2 loses its cursor, so its rebuild rewrites x.
func TestStaleImageRebuildsScope(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	if err := c.apply(ctx, func(a *applier) error {
		return errors.Join(a.addScope("s1"), a.addScope("s2"), a.setCursor("s1", ptr("c1")), a.setCursor("s2", ptr("c2")))
	}); err != nil {
		t.Fatal(err)
	}
	serverRow(t, c, "s2", "x", `{"id":"x","n":2}`, "v2", 2)
	resp := &pullResponse{
		Changes: []change{
			{Scope: "s1", Table: "items", Op: "upsert", PK: json.RawMessage(`{"id":"x"}`), Row: json.RawMessage(`{"id":"x","n":1}`), ServerVersion: "v1", RowChecksum: 1},
			{Scope: "s1", Table: "items", Op: "delete", PK: json.RawMessage(`{"id":"x"}`)},
		},
		ScopeCursors: map[string]string{"s1": "c1b", "s2": "c2b"},
		Checksums:    map[string]json.RawMessage{"s1": json.RawMessage(`"0"`), "s2": json.RawMessage(`"2"`)},
	}
	requested := map[string]cursorRef{"s1": {Cursor: ptr("c1")}, "s2": {Cursor: ptr("c2")}}
	if err := c.apply(ctx, func(a *applier) error { return a.page(requested, resp, &Report{}) }); err != nil {
		t.Fatal(err)
	}
	if got := count(t, c, `SELECT count(*) FROM _synchro_scopes WHERE scope = 's2' AND cursor IS NULL`); got != 1 {
		t.Fatal("s2 holds x at v2 while x's image is v1, and s2 is not rebuilt")
	}
	if got := count(t, c, `SELECT count(*) FROM _synchro_scopes WHERE scope = 's1' AND cursor = 'c1b'`); got != 1 {
		t.Fatal("s1, which holds nothing stale, lost its cursor")
	}
	// The same page without the stale delivery changes no cursor.
	serverRow(t, c, "s2", "x", `{"id":"x","n":2}`, "v2", 2)
	if err := c.apply(ctx, func(a *applier) error {
		if err := a.setCursor("s2", ptr("c2")); err != nil {
			return err
		}
		return a.page(requested, &pullResponse{ScopeCursors: resp.ScopeCursors, Checksums: resp.Checksums}, &Report{})
	}); err != nil {
		t.Fatal(err)
	}
	if got := count(t, c, `SELECT count(*) FROM _synchro_scopes WHERE cursor IS NULL`); got != 0 {
		t.Fatal("a scope lost its cursor although every held version matches the images")
	}
}

// TestConflictImageAheadKeepsCursor: a conflict answer's server_row can be a
// version the stream has not reached (a direct write not captured yet). The row
// then has that image while its scope still holds the older version; the scope
// keeps its cursor, and the stream's later delivery makes the image its own again.
func TestConflictImageAheadKeepsCursor(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	if err := c.apply(ctx, func(a *applier) error {
		return errors.Join(a.addScope("s1"), a.setCursor("s1", ptr("c1")))
	}); err != nil {
		t.Fatal(err)
	}
	serverRow(t, c, "s1", "b", `{"id":"b","n":1}`, "v1", 1)
	mustExec(t, c, `UPDATE items SET n = 9 WHERE id = 'b'`)
	batch, err := c.nextBatch(ctx, 1<<62)
	if err != nil || len(batch) != 1 {
		t.Fatalf("batch %d, %v", len(batch), err)
	}
	if err := c.apply(ctx, func(a *applier) error {
		_, err := pushApplier{a}.outcomes(batch, []outcome{{MutationID: batch[0].m.MutationID, Status: "conflict", Code: "version_conflict",
			ServerVersion: ptr("v7"), ServerRow: json.RawMessage(`{"id":"b","n":7}`)}}, &Report{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	requested := map[string]cursorRef{"s1": {Cursor: ptr("c1")}}
	final := &pullResponse{ScopeCursors: map[string]string{"s1": "c1b"}, Checksums: map[string]json.RawMessage{"s1": json.RawMessage(`"1"`)}}
	if err := c.apply(ctx, func(a *applier) error { return a.page(requested, final, &Report{}) }); err != nil {
		t.Fatal(err)
	}
	if got := count(t, c, `SELECT count(*) FROM _synchro_scopes WHERE scope = 's1' AND cursor = 'c1b'`); got != 1 {
		t.Fatal("s1 lost its cursor because the conflict's server_row is ahead of the stream")
	}
	if got := count(t, c, `SELECT n FROM items WHERE id = 'b'`); got != 7 {
		t.Fatalf("b does not show the conflict's server_row: n = %d", got)
	}
	// The stream delivers v7: the image is the stream's again, and a later stale
	// delivery is caught as before.
	serverRow(t, c, "s1", "b", `{"id":"b","n":7}`, "v7", 7)
	if got := count(t, c, `SELECT count(*) FROM _synchro_images WHERE pk = '{"id":"b"}' AND pushed = 0 AND server_version = 'v7'`); got != 1 {
		t.Fatal("the stream's delivery did not make the image the stream's")
	}
}

// TestOpenUpgradesImages: a replica whose images table predates the pushed
// column gains it when it is opened.
func TestOpenUpgradesImages(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.sqlite")
	c, err := Open(ctx, path, Config{ServerURL: "http://127.0.0.1:1", ClientID: "unit"})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, `ALTER TABLE _synchro_images DROP COLUMN pushed`)
	c.Close()
	c, err = Open(ctx, path, Config{ServerURL: "http://127.0.0.1:1", ClientID: "unit"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := count(t, c, `SELECT count(*) FROM pragma_table_info('_synchro_images') WHERE name = 'pushed'`); got != 1 {
		t.Fatal("the images table did not gain the pushed column")
	}
}

// TestRejectionsRevert: a rejected change is reverted to the server image (or
// deleted when there is none); a conflict takes server_row, or deletes the row
// when the server has none.
func TestRejectionsRevert(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	serverRow(t, c, "s1", "a", `{"id":"a","n":1}`, "v1", 1)
	serverRow(t, c, "s1", "b", `{"id":"b","n":1}`, "v1", 1)
	mustExec(t, c, `UPDATE items SET n = 9 WHERE id IN ('a', 'b')`)
	mustExec(t, c, `INSERT INTO items (id, n) VALUES ('new', 1), ('gone', 1)`)
	batch, err := c.nextBatch(ctx, 1<<62)
	if err != nil || len(batch) != 4 {
		t.Fatalf("batch %d, %v", len(batch), err)
	}
	id := map[string]string{}
	for _, q := range batch {
		id[q.key] = q.m.MutationID
	}
	var rep Report
	err = c.apply(ctx, func(a *applier) error {
		_, err := pushApplier{a}.outcomes(batch, []outcome{
			{MutationID: id[`{"id":"a"}`], Status: "rejected", Code: "policy_rejected", Message: "no"},
			{MutationID: id[`{"id":"b"}`], Status: "conflict", Code: "version_conflict", ServerVersion: ptr("v7"), ServerRow: json.RawMessage(`{"id":"b","n":7}`)},
			{MutationID: id[`{"id":"new"}`], Status: "rejected", Code: "validation_failed", Message: "bad"},
			{MutationID: id[`{"id":"gone"}`], Status: "conflict", Code: "version_conflict", ServerRow: json.RawMessage(`null`)},
		}, &rep)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rejected != 4 {
		t.Fatalf("report %+v", rep)
	}
	requireQueue(t, c)
	if got := count(t, c, `SELECT n FROM items WHERE id = 'a'`); got != 1 {
		t.Fatalf("a not reverted: n = %d", got)
	}
	if got := count(t, c, `SELECT n FROM items WHERE id = 'b'`); got != 7 {
		t.Fatalf("b did not take server_row: n = %d", got)
	}
	if got := count(t, c, `SELECT count(*) FROM items WHERE id IN ('new', 'gone')`); got != 0 {
		t.Fatal("rejected inserts were kept")
	}
	rs, err := c.Rejections(ctx)
	if err != nil || len(rs) != 4 || rs[0].Code == "" || rs[0].At.IsZero() {
		t.Fatalf("rejections %+v, %v", rs, err)
	}
}

// TestUnknownOutcomeKeepsChange: a push answer whose status is not one of the
// protocol's (applied, conflict, rejected, retry) is an error that changes
// nothing: the local change stays in flight, to be resent with its mutation
// ID, instead of being reverted and discarded as a rejection.
func TestUnknownOutcomeKeepsChange(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	mustExec(t, c, `INSERT INTO items (id, n) VALUES ('a', 1)`)
	batch, err := c.nextBatch(ctx, 1<<62)
	if err != nil || len(batch) != 1 {
		t.Fatalf("batch %d, %v", len(batch), err)
	}
	for _, status := range []string{"accepted", ""} {
		err = c.apply(ctx, func(a *applier) error {
			_, err := pushApplier{a}.outcomes(batch, []outcome{{MutationID: batch[0].m.MutationID, Status: status}}, &Report{})
			return err
		})
		if err == nil {
			t.Errorf("status %q: no error", status)
		}
		requireQueue(t, c, entry{Op: "upsert", PK: `{"id":"a"}`, Sent: true})
		if count(t, c, `SELECT count(*) FROM items WHERE id = 'a'`) != 1 || count(t, c, `SELECT count(*) FROM _synchro_rejections`) != 0 {
			t.Fatalf("status %q: the local row was reverted or a rejection recorded", status)
		}
	}
}

// TestPullRowOfAnotherKey: a pull change whose row carries another key than
// its pk is an error that changes nothing. Applied, the local table would
// hold row b while the scope's metadata holds a: the checksum (summed from the
// metadata) would still match, and a later delete of a would leave b behind.
func TestPullRowOfAnotherKey(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	setCursor(t, c, "s1", "c1")
	resp := pullResponse{
		Changes: []change{{Scope: "s1", Table: "items", Op: "upsert", PK: json.RawMessage(`{"id":"a"}`),
			Row: json.RawMessage(`{"id":"b","n":1}`), ServerVersion: "v1", RowChecksum: 1}},
		ScopeCursors: map[string]string{"s1": "c2"},
		Checksums:    map[string]json.RawMessage{"s1": json.RawMessage(`"1"`)},
	}
	err := c.apply(ctx, func(a *applier) error {
		return a.page(map[string]cursorRef{"s1": {Cursor: ptr("c1")}}, &resp, &Report{})
	})
	if err == nil {
		t.Fatal("a row of another key was applied")
	}
	for q, want := range map[string]int{
		`SELECT count(*) FROM items`:                               0,
		`SELECT count(*) FROM _synchro_rows`:                       0,
		`SELECT count(*) FROM _synchro_scopes WHERE cursor = 'c1'`: 1,
	} {
		if got := count(t, c, q); got != want {
			t.Fatalf("%s: %d, want %d", q, got, want)
		}
	}
}

// TestPullMissingChecksumRebuilds: a final pull page that moves a scope's
// cursor but carries no checksum for it (the protocol sends one for every
// served scope) leaves the scope unverified; it is rebuilt like a mismatch
// instead of being trusted.
func TestPullMissingChecksumRebuilds(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	serverRow(t, c, "s1", "a", `{"id":"a","n":1}`, "v1", 1)
	setCursor(t, c, "s1", "c1")
	resp := pullResponse{ScopeCursors: map[string]string{"s1": "c2"}, Checksums: map[string]json.RawMessage{}}
	if err := c.apply(ctx, func(a *applier) error {
		return a.page(map[string]cursorRef{"s1": {Cursor: ptr("c1")}}, &resp, &Report{})
	}); err != nil {
		t.Fatal(err)
	}
	if got := count(t, c, `SELECT count(*) FROM _synchro_scopes WHERE scope = 's1' AND cursor IS NULL`); got != 1 {
		t.Fatal("a scope without a checksum on the final page kept its cursor")
	}
}

// TestTransportRetries: retryable answers are retried with backoff until
// success; a non-retryable one is a typed error at once; exhausted attempts
// return the last error.
func TestTransportRetries(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	answers := []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("authorization %q", r.Header.Get("Authorization"))
		}
		status := http.StatusConflict
		if calls < len(answers) {
			status = answers[calls]
		}
		calls++
		w.WriteHeader(status)
		switch status {
		case http.StatusOK:
			w.Write([]byte(`{"ok": true}`))
		case http.StatusGone:
			w.Write([]byte(`{"error": {"code": "rebuild_expired", "message": "pruned", "retryable": true}}`))
		case http.StatusConflict:
			w.Write([]byte(`{"error": {"code": "client_conflict", "message": "other user", "retryable": false}}`))
		default:
			w.Write([]byte(`{"error": {"code": "capture_pending", "message": "wait", "retryable": true}}`))
		}
	}))
	defer srv.Close()
	tr := &transport{base: srv.URL, http: srv.Client(), maxAttempts: 5, backoffBase: time.Millisecond, backoffMax: 5 * time.Millisecond,
		maxBody: 1 << 20, token: func(context.Context) (string, error) { return "tok", nil }}
	var out struct{ OK bool }
	if err := tr.post(context.Background(), "/x", map[string]any{}, &out); err != nil || !out.OK || calls != 3 {
		t.Fatalf("post: %v, %+v after %d calls", err, out, calls)
	}
	err := tr.post(context.Background(), "/x", map[string]any{}, &out)
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusConflict || e.Code != "client_conflict" || e.Message != "other user" || calls != 4 {
		t.Fatalf("non-retryable: %v after %d calls", err, calls)
	}

	answers, calls = []int{503, 503, 503, 503, 503, 503}, 0
	tr.maxAttempts = 3
	err = tr.post(context.Background(), "/x", map[string]any{}, &out)
	if !errors.As(err, &e) || e.Code != "capture_pending" || !e.Retryable || calls != 3 {
		t.Fatalf("exhausted: %v after %d calls", err, calls)
	}

	// rebuild_expired is retryable by restarting the rebuild, not by sending
	// the same request again: the transport returns it at once.
	answers, calls = []int{http.StatusGone, http.StatusOK}, 0
	err = tr.post(context.Background(), "/x", map[string]any{}, &out)
	if !errors.As(err, &e) || e.Code != codeRebuildExpired || !e.Retryable || calls != 1 {
		t.Fatalf("rebuild_expired: %v after %d calls, want it returned after 1", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.post(ctx, "/x", map[string]any{}, &out); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 20, 18, 22, 11, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"": 0, "2": 2 * time.Second, "x": 0, "-1": 0,
		"Fri, 20 Mar 2026 18:22:14 GMT": 3 * time.Second,
	} {
		if got := retryAfter(h, now); got != want {
			t.Errorf("retryAfter(%q) = %s, want %s", h, got, want)
		}
	}
	tr := &transport{backoffBase: 100 * time.Millisecond, backoffMax: time.Second}
	if d := tr.backoff(1, 3*time.Second); d != 3*time.Second {
		t.Fatalf("Retry-After not honoured: %s", d)
	}
	if d := tr.backoff(10, 0); d < time.Second || d > 1200*time.Millisecond {
		t.Fatalf("backoff not capped: %s", d)
	}
}

// TestManifestRefusesNamesSQLiteConfuses: SQLite compares names ignoring case,
// so a manifest whose tables differ only in case, or whose table is the SDK's
// own side table in other case, is refused: installed, the second table would
// silently share the first's SQLite table (CREATE TABLE IF NOT EXISTS), and
// "_SYNCHRO_queue" would put capture triggers on the SDK's queue and let pull
// pages write into it.
func TestManifestRefusesNamesSQLiteConfuses(t *testing.T) {
	tbl := func(name string) string {
		return `{"name": "` + name + `", "primary_key": ["id"], "columns": [{"name": "id", "type": "string"}]}`
	}
	for _, tables := range [][]string{
		{tbl("_SYNCHRO_queue")},
		{tbl("_Synchro_rows")},
		{tbl("SQLite_stat1")},
		{tbl("Items"), tbl("items")},
	} {
		raw := `{"version": 1, "hash": "h", "tables": [` + strings.Join(tables, ", ") + `]}`
		if _, err := parseManifest([]byte(raw)); err == nil {
			t.Errorf("manifest %s accepted", raw)
		}
	}
}

func TestConversions(t *testing.T) {
	for _, tc := range []struct {
		typ, wire string
		local     any
	}{
		{"int64", `9007199254740993`, int64(9007199254740993)},
		{"float", `1.5`, 1.5},
		{"boolean", `true`, int64(1)},
		{"json", `{"a": [1, "x"]}`, `{"a":[1,"x"]}`},
		{"json", `"text"`, `"text"`},
		{"datetime", `"2026-03-20T18:22:11Z"`, "2026-03-20T18:22:11Z"},
		{"string", `null`, nil},
	} {
		got, err := toLocal(tc.typ, json.RawMessage(tc.wire))
		if err != nil || got != tc.local {
			t.Errorf("toLocal(%s, %s) = %#v, %v; want %#v", tc.typ, tc.wire, got, err, tc.local)
		}
	}
	if b, err := toLocal("bytes", json.RawMessage(`"AQI="`)); err != nil || string(b.([]byte)) != "\x01\x02" {
		t.Errorf("bytes: %v %v", b, err)
	}
	if _, err := toLocal("int", json.RawMessage(`"x"`)); err == nil {
		t.Error("a string for an int column converted")
	}
}

// fakeServer answers the protocol for one scope s1 of table items: the first
// push is answered server_retryable, and the first pull with a wrong checksum.
type fakeServer struct {
	mu        sync.Mutex
	pushes    [][]string // mutation IDs per push
	pulls     int
	rebuilds  int
	rows      map[string]json.RawMessage
	checksums map[string]uint32
	pullPad   int   // bytes of padding added to each pull answer
	pullRows  []any // changes of each pull answer
}

func (f *fakeServer) sum() uint32 {
	var s uint32
	for _, c := range f.checksums {
		s += c
	}
	return s
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var req map[string]json.RawMessage
	_ = json.NewDecoder(r.Body).Decode(&req)
	var resp any
	switch r.URL.Path {
	case "/sync/connect":
		resp = map[string]any{"schema": map[string]any{"version": 1, "hash": "h1", "action": "replace"},
			"schema_definition": json.RawMessage(testManifest), "scope_set_version": 1,
			"scopes": map[string]any{"add": []any{map[string]any{"id": "s1", "cursor": nil}}, "remove": []any{}}, "rebuild": []any{}}
		if _, ok := req["schema"]; ok {
			resp.(map[string]any)["schema"] = map[string]any{"version": 1, "hash": "h1", "action": "none"}
			delete(resp.(map[string]any), "schema_definition")
		}
	case "/sync/rebuild":
		f.rebuilds++
		var recs []any
		for id, row := range f.rows {
			recs = append(recs, map[string]any{"table": "items", "pk": map[string]any{"id": id}, "row": row,
				"server_version": "v", "row_checksum": f.checksums[id]})
		}
		resp = map[string]any{"scope": "s1", "records": recs, "has_more": false, "cursor": nil,
			"final_scope_cursor": "c", "checksum": json.Number(jsonNum(f.sum()))}
	case "/sync/pull":
		f.pulls++
		sum := f.sum()
		if f.pulls == 1 {
			sum++
		}
		resp = map[string]any{"changes": orEmpty(f.pullRows), "scope_cursors": map[string]any{"s1": "c"}, "scope_set_version": 1,
			"scope_updates": map[string]any{"add": []any{}, "remove": []any{}}, "rebuild": []any{}, "has_more": false,
			"checksums": map[string]any{"s1": jsonNum(sum)}, "padding": strings.Repeat(" ", f.pullPad)}
	case "/sync/push":
		var muts []mutation
		_ = json.Unmarshal(req["mutations"], &muts)
		var ids []string
		var accepted, rejected []any
		for _, m := range muts {
			ids = append(ids, m.MutationID)
			if len(f.pushes) == 0 {
				rejected = append(rejected, map[string]any{"mutation_id": m.MutationID, "status": "retry", "code": "server_retryable"})
				continue
			}
			row := map[string]any{"id": json.RawMessage(`"` + "i2" + `"`)}
			for k, v := range m.Columns {
				row[k] = v
			}
			raw, _ := json.Marshal(row)
			accepted = append(accepted, map[string]any{"mutation_id": m.MutationID, "status": "applied", "server_version": "v9", "server_row": json.RawMessage(raw)})
		}
		f.pushes = append(f.pushes, ids)
		resp = map[string]any{"accepted": orEmpty(accepted), "rejected": orEmpty(rejected)}
	default:
		http.NotFound(w, r)
		return
	}
	_ = json.NewEncoder(w).Encode(resp)
}

func jsonNum(n uint32) string { b, _ := json.Marshal(n); return string(b) }

func orEmpty(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}

// TestSyncFakeServer: a whole cycle against a fake server: the scope is
// rebuilt, a checksum mismatch rebuilds it again, and a mutation answered
// server_retryable is resent with the same mutation_id.
func TestSyncFakeServer(t *testing.T) {
	f := &fakeServer{rows: map[string]json.RawMessage{"i1": json.RawMessage(`{"id":"i1","n":1,"done":false,"data":null,"meta":null}`)},
		checksums: map[string]uint32{"i1": 4294967295}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx := context.Background()
	c, err := Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"), Config{ServerURL: srv.URL, ClientID: "fake", BackoffBase: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.SyncReport(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rebuilt) != 2 || f.rebuilds != 2 || f.pulls != 2 {
		t.Fatalf("report %+v: %d rebuilds, %d pulls (want the checksum mismatch to rebuild again)", rep, f.rebuilds, f.pulls)
	}
	var n int
	if err := c.DB().QueryRow(`SELECT n FROM items WHERE id = 'i1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("i1: %d, %v", n, err)
	}

	if _, err := c.DB().Exec(`INSERT INTO items (id, n, done) VALUES ('i2', 2, 1)`); err != nil {
		t.Fatal(err)
	}
	f.checksums["i2"] = 1 // the server's view once i2 is applied
	f.rows["i2"] = json.RawMessage(`{"id":"i2","n":2,"done":true,"data":null,"meta":null}`)
	if rep, err = c.SyncReport(ctx); err != nil {
		t.Fatal(err)
	}
	if len(f.pushes) != 2 || f.pushes[0][0] != f.pushes[1][0] || rep.Pushed != 1 || rep.Retried != 1 || rep.Pending != 0 {
		t.Fatalf("pushes %v, report %+v", f.pushes, rep)
	}
	// The pull delivered no change for i2, so the checksum (which now counts
	// i2) differs and the scope is rebuilt to hold it.
	if len(rep.Rebuilt) != 1 {
		t.Fatalf("report %+v", rep)
	}
	scopes, err := c.Scopes(ctx)
	if err != nil || len(scopes) != 1 || scopes[0].Rows != 2 || scopes[0].Checksum != 0 || !scopes[0].Synced {
		t.Fatalf("scopes %+v, %v", scopes, err)
	}
	var done sql.NullInt64
	if err := c.DB().QueryRow(`SELECT done FROM items WHERE id = 'i2'`).Scan(&done); err != nil || done.Int64 != 1 {
		t.Fatalf("i2 done: %v, %v", done, err)
	}
}

// TestRebuildExpiredRestarts: a rebuild answered 410 rebuild_expired (the
// server's retention horizon passed the session's position), here on its
// first page, restarts with cursor null and converges; a rebuild overtaken on
// every attempt fails the Sync with the server's retryable error, and the
// next Sync rebuilds the scope. (tests/client_test.go overtakes later pages
// of a real server's sessions.)
func TestRebuildExpiredRestarts(t *testing.T) {
	for _, expire := range []int{1, maxRebuildAttempts} {
		f := &fakeServer{rows: map[string]json.RawMessage{"i1": json.RawMessage(`{"id":"i1","n":1,"done":false,"data":null,"meta":null}`)},
			checksums: map[string]uint32{"i1": 7}, pulls: 1} // pulls: 1: every pull answers the true checksum
		var mu sync.Mutex
		var cursors []string // the cursor of each rebuild request
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/sync/rebuild" {
				var req rebuildRequest
				raw, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(raw, &req)
				r.Body = io.NopCloser(bytes.NewReader(raw))
				mu.Lock()
				cursors = append(cursors, fmt.Sprint(req.Cursor))
				refuse := len(cursors) <= expire
				mu.Unlock()
				if refuse {
					w.WriteHeader(http.StatusGone)
					w.Write([]byte(`{"error": {"code": "rebuild_expired", "message": "pruned", "retryable": true}}`))
					return
				}
			}
			f.ServeHTTP(w, r)
		}))
		ctx := context.Background()
		c, err := Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"), Config{ServerURL: srv.URL, ClientID: "fake", BackoffBase: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := c.SyncReport(ctx)
		if expire == maxRebuildAttempts {
			var e *Error
			if !errors.As(err, &e) || e.Code != codeRebuildExpired || !e.Retryable {
				t.Fatalf("a rebuild overtaken %d times: %v, want the retryable rebuild_expired", expire, err)
			}
			rep, err = c.SyncReport(ctx)
		}
		if err != nil || !slices.Equal(rep.Rebuilt, []string{"s1"}) {
			t.Fatalf("expired %d times: %+v, %v", expire, rep, err)
		}
		if want := slices.Repeat([]string{"<nil>"}, expire+1); !slices.Equal(cursors, want) {
			t.Fatalf("expired %d times: rebuild requests with cursors %v, want %v (each a new session, none resent)", expire, cursors, want)
		}
		if got := count(t, c, `SELECT count(*) FROM items WHERE id = 'i1' AND n = 1`); got != 1 {
			t.Fatalf("expired %d times: the replica does not hold i1", expire)
		}
		c.Close()
		srv.Close()
	}
}

// TestIntegerKey: an integer key travels as a JSON number, and the applied
// answer's server_row replaces the local row.
func TestIntegerKey(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	mustExec(t, c, `INSERT INTO nums (id, v) VALUES ('7', 'y')`) // INTEGER affinity: stored as 7
	batch, err := c.nextBatch(ctx, 1<<62)
	if err != nil || len(batch) != 1 || string(batch[0].m.PK) != `{"id":7}` || mustJSON(t, batch[0].m.Columns) != `{"v":"y"}` {
		t.Fatalf("batch %+v, %v", batch, err)
	}
	var rep Report
	err = c.apply(ctx, func(a *applier) error {
		_, err := pushApplier{a}.outcomes(batch, []outcome{
			{MutationID: batch[0].m.MutationID, Status: "applied", ServerVersion: ptr("v1"), ServerRow: json.RawMessage(`{"id":7,"v":"Y"}`)},
		}, &rep)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	requireQueue(t, c)
	var v string
	if err := c.DB().QueryRow(`SELECT v FROM nums WHERE id = 7`).Scan(&v); err != nil || v != "Y" || rep.Pushed != 1 {
		t.Fatalf("the applied row did not take server_row: %q, %v, %+v", v, err, rep)
	}
	mustExec(t, c, `UPDATE nums SET v = 'z' WHERE id = 7`)
	requireQueue(t, c, entry{Op: "update", PK: `{"id":7}`, Base: "v1"})
}

// TestSchemaChanges: replace drops removed tables with their metadata and keeps
// the others; rebuild_local empties every synced table and the row metadata,
// records queued changes as schema_reset rejections and marks every scope for
// a rebuild.
func TestSchemaChanges(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	serverRow(t, c, "s1", "a", `{"id":"a","n":1}`, "v1", 1)
	setCursor(t, c, "s1", "cur")
	mustExec(t, c, `INSERT INTO nums (id, v) VALUES (1, 'x')`)
	mustExec(t, c, `INSERT INTO items (id) VALUES ('b')`)

	var def map[string]any
	if err := json.Unmarshal([]byte(testManifest), &def); err != nil {
		t.Fatal(err)
	}
	def["hash"], def["tables"] = "h2", def["tables"].([]any)[:1] // nums removed
	raw, _ := json.Marshal(def)
	m, err := parseManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.installSchema(ctx, m, false); err != nil {
		t.Fatal(err)
	}
	if got := c.Tables(); len(got) != 1 || got[0] != "items" {
		t.Fatalf("tables after replace: %v", got)
	}
	if got := count(t, c, `SELECT count(*) FROM sqlite_master WHERE name = 'nums'`); got != 0 {
		t.Fatal("the removed table is still there")
	}
	requireQueue(t, c, entry{Op: "upsert", PK: `{"id":"b"}`})
	if got := count(t, c, `SELECT count(*) FROM items`); got != 2 {
		t.Fatalf("replace lost rows of a kept table: %d left", got)
	}

	def["hash"] = "h3"
	raw, _ = json.Marshal(def)
	if m, err = parseManifest(raw); err != nil {
		t.Fatal(err)
	}
	if err := c.installSchema(ctx, m, true); err != nil {
		t.Fatal(err)
	}
	requireQueue(t, c)
	for q, want := range map[string]int{
		`SELECT count(*) FROM items`:                                           0,
		`SELECT count(*) FROM _synchro_rows`:                                   0,
		`SELECT count(*) FROM _synchro_images`:                                 0,
		`SELECT count(*) FROM _synchro_scopes WHERE cursor IS NULL`:            1,
		`SELECT count(*) FROM _synchro_rejections WHERE code = 'schema_reset'`: 1,
		`SELECT count(*) FROM _synchro_client WHERE schema_hash = 'h3'`:        1,
	} {
		if got := count(t, c, q); got != want {
			t.Fatalf("%s: %d, want %d", q, got, want)
		}
	}
	mustExec(t, c, `INSERT INTO items (id) VALUES ('c')`) // the triggers are back
	requireQueue(t, c, entry{Op: "upsert", PK: `{"id":"c"}`})
}

// TestResponseCap: an answer larger than Config.MaxResponseBytes is read no
// further and fails the Sync with response_too_large (not retried), leaving the
// replica as it was: the pull page it carried is not applied. Open defaults the
// cap.
func TestResponseCap(t *testing.T) {
	f := &fakeServer{rows: map[string]json.RawMessage{"i1": json.RawMessage(`{"id":"i1","n":1,"done":false,"data":null,"meta":null}`)},
		checksums: map[string]uint32{"i1": 7}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx := context.Background()
	c, err := Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"), Config{ServerURL: srv.URL, ClientID: "fake",
		BackoffBase: time.Millisecond, MaxResponseBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	f.pullPad = 1 << 20
	f.pullRows = []any{map[string]any{"scope": "s1", "table": "items", "op": "upsert", "pk": map[string]any{"id": "i1"},
		"row": json.RawMessage(`{"id":"i1","n":99}`), "server_version": "v2", "row_checksum": 7}}
	pulls := f.pulls
	err = c.Sync(ctx)
	var e *Error
	if !errors.As(err, &e) || e.Code != "response_too_large" || e.Retryable || !strings.Contains(e.Message, "65536") {
		t.Fatalf("an answer over the cap: %v", err)
	}
	if f.pulls != pulls+1 {
		t.Fatalf("%d pulls for one answer over the cap, want 1 (it is not retryable)", f.pulls-pulls)
	}
	for q, want := range map[string]int{
		`SELECT n FROM items WHERE id = 'i1'`:                                      1,
		`SELECT count(*) FROM _synchro_scopes WHERE scope = 's1' AND cursor = 'c'`: 1,
		`SELECT count(*) FROM _synchro_images WHERE server_version = 'v2'`:         0,
	} {
		if got := count(t, c, q); got != want {
			t.Fatalf("%s: %d, want %d", q, got, want)
		}
	}

	d, err := Open(ctx, filepath.Join(t.TempDir(), "default.sqlite"), Config{ServerURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.cfg.MaxResponseBytes != 64<<20 || d.tr.maxBody != 64<<20 {
		t.Fatalf("default cap %d (transport %d), want 64 MiB", d.cfg.MaxResponseBytes, d.tr.maxBody)
	}
}

// TestPullServesOnlyResumedScopes: a pull page moves only the cursors of the
// scopes it was asked to resume. A page that adds scope x (a new assignment)
// and also carries x's rows and a cursor for it, or a cursor for s2, which was
// asked for with no cursor (it waits for a rebuild), must leave both without a
// cursor: the protocol serves such scopes nothing (they are rebuilt), and
// taking the cursor would mark them synced without the rows before it.
func TestPullServesOnlyResumedScopes(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	setCursor(t, c, "s1", "c1")
	if err := c.apply(ctx, func(a *applier) error { return a.addScope("s2") }); err != nil {
		t.Fatal(err)
	}
	resp := pullResponse{
		Changes: []change{
			{Scope: "s1", Table: "items", Op: "upsert", PK: json.RawMessage(`{"id":"a"}`), Row: json.RawMessage(`{"id":"a","n":1}`), ServerVersion: "v1", RowChecksum: 1},
			{Scope: "x", Table: "items", Op: "upsert", PK: json.RawMessage(`{"id":"b"}`), Row: json.RawMessage(`{"id":"b","n":2}`), ServerVersion: "v1", RowChecksum: 2},
		},
		ScopeCursors: map[string]string{"s1": "c1b", "s2": "c2", "x": "cx"},
		ScopeUpdates: scopeDiff{Add: []struct {
			ID string `json:"id"`
		}{{ID: "x"}}},
		HasMore: true,
	}
	requested := map[string]cursorRef{"s1": {Cursor: ptr("c1")}, "s2": {}}
	if err := c.apply(ctx, func(a *applier) error { return a.page(requested, &resp, &Report{}) }); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int{
		`SELECT count(*) FROM _synchro_scopes WHERE scope = 's1' AND cursor = 'c1b'`:         1,
		`SELECT count(*) FROM _synchro_scopes WHERE scope IN ('s2', 'x') AND cursor IS NULL`: 2,
		`SELECT count(*) FROM items WHERE id = 'a'`:                                          1,
		`SELECT count(*) FROM items WHERE id = 'b'`:                                          0,
	} {
		if got := count(t, c, q); got != want {
			t.Fatalf("%s: %d, want %d", q, got, want)
		}
	}
}

// TestPushAnswerKeyIsTheServers: the server answers a pushed row under its
// canonical key (a uuid in lower case however it was sent). The replica then
// holds the row, its queued later edits and its image under that key, so the
// push answer and the pull's delivery of the row are one row, not two.
func TestPushAnswerKeyIsTheServers(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	const a, b = "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "B0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"
	la, lb := strings.ToLower(a), strings.ToLower(b)
	mustExec(t, c, `INSERT INTO items (id, n) VALUES (?, 1), (?, 1)`, a, b)
	batch, err := c.nextBatch(ctx, 1<<62)
	if err != nil || len(batch) != 2 {
		t.Fatalf("batch %d, %v", len(batch), err)
	}
	mustExec(t, c, `UPDATE items SET n = 2 WHERE id = ?`, b) // while the push is in flight
	var answers []outcome
	for _, q := range batch {
		var pk struct{ ID string }
		if err := json.Unmarshal(q.m.PK, &pk); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, outcome{MutationID: q.m.MutationID, Status: "applied", ServerVersion: ptr("v1"),
			ServerRow: json.RawMessage(`{"id":"` + strings.ToLower(pk.ID) + `","n":1}`)})
	}
	if err := c.apply(ctx, func(a *applier) error { _, err := pushApplier{a}.outcomes(batch, answers, &Report{}); return err }); err != nil {
		t.Fatal(err)
	}
	requireRows := func() {
		t.Helper()
		got := map[string]int{}
		rows, err := c.DB().Query(`SELECT id, n FROM items`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				t.Fatal(err)
			}
			got[id] = n
		}
		if len(got) != 2 || got[la] != 1 || got[lb] != 2 {
			t.Fatalf("local rows %v, want %s=1 and %s=2 (the later edit)", got, la, lb)
		}
	}
	requireRows()
	requireQueue(t, c, entry{Op: "update", PK: `{"id":"` + lb + `"}`, Base: "v1"})
	if got := count(t, c, `SELECT count(*) FROM _synchro_images WHERE pk IN (?, ?)`, `{"id":"`+la+`"}`, `{"id":"`+lb+`"}`); got != 2 {
		t.Fatalf("%d images under the server's keys, want 2", got)
	}
	if got := count(t, c, `SELECT count(*) FROM _synchro_images`); got != 2 {
		t.Fatalf("%d images, want 2", got)
	}
	serverRow(t, c, "s1", la, `{"id":"`+la+`","n":1}`, "v1", 1)
	serverRow(t, c, "s1", lb, `{"id":"`+lb+`","n":1}`, "v1", 1)
	requireRows()
}

// TestRefusedChangeKeepsLaterEdits: edits of a row made while its push was in
// flight are not dropped when the server refuses the pushed change: they stay
// queued, the local row keeps them, and the next push has the server answer
// them on their own. Against the old base version an edit conflicts again and
// is recorded as well; after a refused insert it is pushed as an upsert, as
// if it had been merged into the insert.
func TestRefusedChangeKeepsLaterEdits(t *testing.T) {
	c := openLocal(t)
	ctx := context.Background()
	serverRow(t, c, "s1", "a", `{"id":"a","n":1}`, "v1", 1)
	mustExec(t, c, `UPDATE items SET n = 9 WHERE id = 'a'`)
	mustExec(t, c, `INSERT INTO items (id, n) VALUES ('c', -1)`)
	batch, err := c.nextBatch(ctx, 1<<62)
	if err != nil || len(batch) != 2 {
		t.Fatalf("batch %d, %v", len(batch), err)
	}
	id := map[string]string{}
	for _, q := range batch {
		id[q.key] = q.m.MutationID
	}
	mustExec(t, c, `UPDATE items SET done = 1 WHERE id = 'a'`) // while the push is in flight
	mustExec(t, c, `UPDATE items SET n = 3 WHERE id = 'c'`)
	answer := func(batch []queued, answers ...outcome) {
		t.Helper()
		var rep Report
		if err := c.apply(ctx, func(a *applier) error { _, err := pushApplier{a}.outcomes(batch, answers, &rep); return err }); err != nil {
			t.Fatal(err)
		}
		if rep.Rejected != len(answers) {
			t.Fatalf("report %+v", rep)
		}
	}
	answer(batch,
		outcome{MutationID: id[`{"id":"a"}`], Status: "conflict", Code: "version_conflict", ServerVersion: ptr("v7"), ServerRow: json.RawMessage(`{"id":"a","n":7}`)},
		outcome{MutationID: id[`{"id":"c"}`], Status: "rejected", Code: "validation_failed", Message: "n >= 0"})
	requireQueue(t, c, entry{Op: "update", PK: `{"id":"a"}`, Base: "v1"}, entry{Op: "upsert", PK: `{"id":"c"}`})
	if got := c.DB().QueryRow(`SELECT 1 FROM items WHERE id = 'a' AND n = 9 AND done = 1`).Scan(new(int)); got != nil {
		t.Fatalf("a lost its queued edits: %v", got)
	}
	if got := count(t, c, `SELECT n FROM items WHERE id = 'c'`); got != 3 {
		t.Fatalf("c lost its queued edit: n = %d", got)
	}
	if got := count(t, c, `SELECT count(*) FROM _synchro_images WHERE pk = '{"id":"a"}' AND server_version = 'v7'`); got != 1 {
		t.Fatal("a's image is not the conflict's server row")
	}

	// The next push: a's edit conflicts too and a becomes the server's row.
	batch, err = c.nextBatch(ctx, 1<<62)
	if err != nil || len(batch) != 2 {
		t.Fatalf("second batch %d, %v", len(batch), err)
	}
	answer(batch[:1], outcome{MutationID: batch[0].m.MutationID, Status: "conflict", Code: "version_conflict", ServerVersion: ptr("v7"), ServerRow: json.RawMessage(`{"id":"a","n":7}`)})
	if got := count(t, c, `SELECT n FROM items WHERE id = 'a'`); got != 7 {
		t.Fatalf("a is not the server's row after its last queued edit conflicted: n = %d", got)
	}
	rs, err := c.Rejections(ctx)
	if err != nil || len(rs) != 3 || rs[2].MutationID != batch[0].m.MutationID {
		t.Fatalf("rejections %+v, %v; want the two refused changes and the later edit of a", rs, err)
	}
}

// TestRebuildRowOfAnotherKey: a rebuild record whose row carries another key
// than its pk fails the scope's replacement, which changes nothing, both for a
// table whose rows SQLite writes from staging (nums) and for one written row by
// row (items).
func TestRebuildRowOfAnotherKey(t *testing.T) {
	for _, tc := range []struct{ table, pk, row string }{
		{"nums", `{"id":1}`, `{"id":2,"v":"x"}`},
		{"items", `{"id":"a"}`, `{"id":"b","n":1}`},
	} {
		c := openLocal(t)
		ctx := context.Background()
		if (c.schema.byName[tc.table].stagedSQL != "") != (tc.table == "nums") {
			t.Fatalf("%s: stagedSQL %q", tc.table, c.schema.byName[tc.table].stagedSQL)
		}
		var resp rebuildResponse
		resp.Records = append(resp.Records, struct {
			Table         string          `json:"table"`
			PK            json.RawMessage `json:"pk"`
			Row           json.RawMessage `json:"row"`
			ServerVersion string          `json:"server_version"`
			RowChecksum   uint32          `json:"row_checksum"`
		}{tc.table, json.RawMessage(tc.pk), json.RawMessage(tc.row), "v1", 1})
		if err := c.stage(ctx, "s1", &resp); err != nil {
			t.Fatal(err)
		}
		err := c.apply(ctx, func(a *applier) error { return a.replaceScope("s1", "c1") })
		if err == nil || !strings.Contains(err.Error(), "another key") {
			t.Fatalf("%s: replaceScope: %v; want the row of another key refused", tc.table, err)
		}
		for q, want := range map[string]int{
			`SELECT count(*) FROM ` + tc.table:     0,
			`SELECT count(*) FROM _synchro_rows`:   0,
			`SELECT count(*) FROM _synchro_scopes`: 0,
		} {
			if got := count(t, c, q); got != want {
				t.Errorf("%s: %s = %d, want %d", tc.table, q, got, want)
			}
		}
	}
}
