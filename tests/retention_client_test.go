package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/client"
)

// overtakingTransport is an SDK replica's network that records every rebuild
// request of one scope and its answer's error code, and holds the request for
// a later page of the first sessions until the test has moved the retention
// horizon past the session's position (it sends a channel on overtake and
// waits for it to be closed).
type overtakingTransport struct {
	scope    string
	sessions int // sessions to overtake
	overtake chan chan struct{}

	mu       sync.Mutex
	requests []rebuildCall
}

// rebuildCall is one rebuild request: its session cursor ("" for a new
// session) and the error code it was answered with ("" for a page).
type rebuildCall struct{ cursor, code string }

func (o *overtakingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path != "/sync/rebuild" {
		return http.DefaultTransport.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var r struct {
		Scope  string  `json:"scope"`
		Cursor *string `json:"cursor"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	if r.Scope != o.scope {
		return http.DefaultTransport.RoundTrip(req)
	}
	call := rebuildCall{}
	if r.Cursor != nil {
		call.cursor = *r.Cursor
		o.mu.Lock()
		hold := o.sessions > 0
		o.sessions--
		o.mu.Unlock()
		if hold {
			done := make(chan struct{})
			select {
			case o.overtake <- done:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
			<-done
		}
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		raw, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return nil, err
		}
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		call.code = e.Error.Code
		res.Body = io.NopCloser(bytes.NewReader(raw))
	}
	o.mu.Lock()
	o.requests = append(o.requests, call)
	o.mu.Unlock()
	return res, nil
}

// TestClientRebuildsPastTheHorizon: the SDK restarts by itself a rebuild
// session the retention horizon overtook (410 rebuild_expired on a later page,
// twice in a row), from cursor null, never resending the expired session's
// cursor, and converges; a cursor the horizon passed later is answered with
// its scope in rebuild, which the SDK rebuilds by itself in the same Sync.
func TestClientRebuildsPastTheHorizon(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		INSERT INTO app.templates VALUES (1, 'welcome');
		INSERT INTO app.docs (id, owner_id, title) SELECT 'd' || i, 'u1', 'seed' FROM generate_series(1, 6) i;`)
	const scope = "user:u1"
	tr := &overtakingTransport{scope: scope, sessions: 2, overtake: make(chan chan struct{})}
	c, err := client.Open(context.Background(), filepath.Join(t.TempDir(), "a.sqlite"), client.Config{
		ServerURL: e.url, ClientID: "a", Token: func(context.Context) (string, error) { return token(t, "u1"), nil },
		HTTPClient: &http.Client{Transport: tr}, PageSize: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := &sdkClient{Client: c, name: "a", user: "u1"}

	// The first Sync, its first two sessions of user:u1 overtaken at their
	// second page: a write to the scope, materialized, and pruning up to it.
	type result struct {
		rep client.Report
		err error
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		rep, err := a.SyncReport(ctx)
		done <- result{rep, err}
	}()
	var res result
	overtaken := 0
	for waiting := true; waiting; {
		select {
		case release := <-tr.overtake:
			overtaken++
			e.d.Exec(t, `UPDATE app.docs SET title = $1 WHERE id = 'd1'`, fmt.Sprintf("overtake %d", overtaken))
			waitMaterialized(t, e.d)
			if pruneAll(t, e.d) == 0 {
				t.Fatal("pruning did not move the horizon")
			}
			close(release)
		case res = <-done:
			waiting = false
		}
	}
	if overtaken != 2 {
		t.Fatalf("%d sessions overtaken, want 2", overtaken)
	}
	if res.err != nil {
		t.Fatalf("the Sync whose rebuild was overtaken twice: %v", res.err)
	}
	if !slices.Contains(res.rep.Rebuilt, scope) {
		t.Fatalf("rebuilt %v, want %s", res.rep.Rebuilt, scope)
	}
	var expired int
	for i, call := range tr.requests {
		if call.code == "" {
			continue
		}
		if call.code != "rebuild_expired" || call.cursor == "" {
			t.Fatalf("rebuild request %d (cursor %q) answered %s, want rebuild_expired on a later page", i, call.cursor, call.code)
		}
		expired++
		if i+1 == len(tr.requests) || tr.requests[i+1].cursor != "" {
			t.Fatalf("the rebuild request after the expired session's is %+v, want a new session (cursor null)", tr.requests[min(i+1, len(tr.requests)-1)])
		}
	}
	if expired != 2 {
		t.Fatalf("%d rebuild requests answered rebuild_expired, want 2: %+v", expired, tr.requests)
	}
	requireReplica(t, e, a)

	// A cursor behind the horizon: pull puts both scopes in rebuild.
	e.d.Exec(t, `UPDATE app.docs SET title = 'behind' WHERE id = 'd2'`)
	e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d7', 'u1', 'new')`)
	waitMaterialized(t, e.d)
	if pruneAll(t, e.d) == 0 {
		t.Fatal("pruning did not move the horizon")
	}
	rep := a.sync(t)
	slices.Sort(rep.Rebuilt)
	if want := []string{"templates_public", scope}; !slices.Equal(rep.Rebuilt, want) || rep.Pulled != 0 {
		t.Fatalf("the sync after the horizon passed every cursor rebuilt %v and pulled %d, want %v rebuilt and nothing pulled", rep.Rebuilt, rep.Pulled, want)
	}
	requireReplica(t, e, a)
	if got := a.localString(t, `SELECT title FROM docs WHERE id = 'd2'`); got != "behind" {
		t.Fatalf("d2 %q after the rebuild, want the write the horizon passed", got)
	}
}
