package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/httpapi"
)

// requestWithin sends method path as user ("" = none) with body (nil = none)
// and a deadline: an answer that does not come within it is an error (the
// request waited behind something it must not wait behind).
func requestWithin(t *testing.T, within time.Duration, method, url, user string, body []byte) (reply, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+token(t, user))
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		return reply{}, err
	}
	resp.Body.Close()
	return reply{Status: resp.StatusCode, Header: resp.Header}, nil
}

// holdRowLock locks app.docs row id in a transaction of its own until the end
// of the test or the returned release.
func holdRowLock(t *testing.T, e *syncEnv, id string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release = func() { _ = tx.Rollback(ctx) }
	t.Cleanup(release)
	if _, err := tx.Exec(ctx, `SELECT FROM app.docs WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	return release
}

// pushesWaitingForLocks counts the pushes waiting for a row lock.
func pushesWaitingForLocks(t *testing.T, e *syncEnv) int {
	t.Helper()
	var n int
	if err := e.d.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE '%synchro.push%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSyncOneUserCannotTakeThePool reproduces issue 28, point 3: one user's
// pushes that wait on row locks (as pushes deadlocking with each other do)
// once held every connection of the HTTP pool, so another user's GET
// /sync/schema waited, and /readyz, which shared the pool, answered "database
// unreachable". Now one user holds at most the pool's size minus one (the rest
// of its requests get 429 retry_later) and /readyz has a pool of its own:
// both answer while the attack lasts.
func TestSyncOneUserCannotTakeThePool(t *testing.T) {
	const poolSize, attack = 4, 8
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id) VALUES ('d1', 'u1')`)
	e.url = serveSyncPool(t, e.d, poolSize, func(s *httpapi.Sync) {
		s.MaxUserRequests = 16 // above the pool's size
		s.PushLockTimeout = time.Minute
	})
	e.connect(t, "u1", "c1")
	release := holdRowLock(t, e, "d1")
	answers := make(chan reply, attack)
	for i := range attack {
		body := mustMarshal(t, map[string]any{"client_id": "c1", "mutations": []any{
			mut(fmt.Sprintf("m%d", i), "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "locked"})}})
		go func() {
			r, err := requestWithin(t, 2*time.Minute, http.MethodPost, e.url+"/sync/push", "u1", []byte(body))
			if err != nil {
				r.Status = -1
			}
			answers <- r
		}()
	}
	// The attack is in place when every push waits for the lock or was
	// refused, or when the pool is full of them.
	var refused []reply
	waitFor(t, "the attack to hold its connections", 30*time.Second, func() (bool, error) {
		for len(answers) > 0 {
			refused = append(refused, <-answers)
		}
		waiting := pushesWaitingForLocks(t, e)
		return waiting+len(refused) == attack || waiting >= poolSize, nil
	})
	r, err := requestWithin(t, 20*time.Second, http.MethodGet, e.url+"/sync/schema", "u2", nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("another user's GET /sync/schema during the attack: %d %v", r.Status, err)
	}
	r, err = requestWithin(t, 20*time.Second, http.MethodGet, e.url+"/readyz", "", nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("/readyz during the attack: %d %v", r.Status, err)
	}
	if want := attack - (poolSize - 1); len(refused) != want {
		t.Fatalf("%d of the user's pushes refused, want %d", len(refused), want)
	}
	for _, r := range refused {
		if r.Status != http.StatusTooManyRequests {
			t.Fatalf("a refused push answered %d, want 429", r.Status)
		}
	}
	release()
	for range poolSize - 1 {
		if r := <-answers; r.Status != http.StatusOK {
			t.Fatalf("a waiting push answered %d after the lock was released", r.Status)
		}
	}
}

// TestSyncPushTimeBudget: a push transaction that runs longer than the push
// timeout (here it waits for a row lock, with a longer lock timeout) is rolled
// back and answered 503 retry_later, releasing its connection; nothing of it
// is applied or recorded, and the same push applies once the lock is free.
func TestSyncPushTimeBudget(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id) VALUES ('d1', 'u1'), ('d0', 'u1')`, func(s *httpapi.Sync) {
		s.PushLockTimeout = time.Minute
		s.PushTimeout = 500 * time.Millisecond
	})
	e.connect(t, "u1", "c1")
	release := holdRowLock(t, e, "d1")
	body := mustMarshal(t, map[string]any{"client_id": "c1", "mutations": []any{
		mut("m0", "docs", "update", map[string]any{"id": "d0"}, map[string]any{"title": "first"}),
		mut("m1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "locked"})}})
	r, err := requestWithin(t, 30*time.Second, http.MethodPost, e.url+"/sync/push", "u1", []byte(body))
	if err != nil || r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("push over its time budget: %d %v, want 503 with Retry-After", r.Status, err)
	}
	if queryBool(t, e.d, `SELECT EXISTS (SELECT FROM app.docs WHERE title IS NOT NULL)`) {
		t.Fatal("the timed-out push changed a row")
	}
	release()
	if list, o := outcome(t, requireOK(t, "push again", e.post(t, "u1", "/sync/push", body)), "m1"); list != "accepted" {
		t.Fatalf("push again: %v", o)
	}
}

// TestSyncBytesInFlightBudget: the request bodies of all sync requests in
// flight share one budget. A slow client's body, announced by Content-Length
// and never sent, holds its part of the budget; another user's request that
// does not fit in the rest is answered 503 retry_later before its body is read,
// and fits again once the slow client is gone.
func TestSyncBytesInFlightBudget(t *testing.T) {
	e := newSyncEnv(t, "", func(s *httpapi.Sync) {
		s.MaxBodyBytes = 64 << 10
		s.MaxBytesInFlight = 100 << 10
	})
	e.connect(t, "u2", "c2")
	addr := strings.TrimPrefix(e.url, "http://")
	// The slow request: its headers, then one byte of its body. Its handler
	// may reserve its part only after a probe below took the budget (then it
	// is refused itself and answered): a slow request that was answered is
	// sent again.
	var slow net.Conn
	sendSlow := func() error {
		if slow != nil {
			slow.Close()
		}
		var err error
		if slow, err = net.Dial("tcp", addr); err != nil {
			return err
		}
		_, err = fmt.Fprintf(slow, "POST /sync/push HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 60000\r\n\r\n{", addr, token(t, "u1"))
		return err
	}
	answered := func() bool {
		_ = slow.SetReadDeadline(time.Now().Add(time.Millisecond))
		n, err := slow.Read(make([]byte, 1))
		var ne net.Error
		return n > 0 || err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	if err := sendSlow(); err != nil {
		t.Fatal(err)
	}
	defer func() { slow.Close() }()
	big := []byte(mustMarshal(t, map[string]any{"client_id": "c2", "mutations": []any{}, "pad": strings.Repeat("x", 50000)}))
	bigPush := func() int {
		r, err := requestWithin(t, 20*time.Second, http.MethodPost, e.url+"/sync/push", "u2", big)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	waitFor(t, "a push beside the slow body to be refused", 30*time.Second, func() (bool, error) {
		if answered() {
			return false, sendSlow()
		}
		return bigPush() == http.StatusServiceUnavailable, nil
	})
	slow.Close()
	waitFor(t, "the push to fit again", 30*time.Second, func() (bool, error) {
		return bigPush() == http.StatusOK, nil
	})
}
