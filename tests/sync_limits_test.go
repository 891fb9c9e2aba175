package tests

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/httpapi"
)

// TestSyncUserRequestLimit: with one request of a user in flight (a push
// waiting for a row lock another transaction holds), the user's next request is
// answered 429 retry_later with Retry-After; another user is not limited; once
// the lock is released the waiting push applies.
func TestSyncUserRequestLimit(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.docs (id, owner_id) VALUES ('d1', 'u1')`, func(s *httpapi.Sync) {
		s.MaxUserRequests = 1
		s.PushLockTimeout = time.Minute
	})
	e.connect(t, "u1", "c1")
	e.connect(t, "u2", "c2")
	ctx := context.Background()
	tx, err := e.d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT FROM app.docs WHERE id = 'd1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	pushed := make(chan reply, 1)
	go func() {
		pushed <- e.post(t, "u1", "/sync/push", map[string]any{"client_id": "c1", "mutations": []any{
			mut("m1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": "locked"})}})
	}()
	waitFor(t, "u1's push to wait for the row lock", 30*time.Second, func() (bool, error) {
		return queryBool(t, e.d, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%synchro.push%')`), nil
	})
	r := e.post(t, "u1", "/sync/connect", map[string]any{"client_id": "c1", "protocol_version": 3})
	requireError(t, "second request", r, http.StatusTooManyRequests, "retry_later")
	if secs, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || secs < 1 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	e.connect(t, "u2", "c2") // another user is not limited
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if list, o := outcome(t, requireOK(t, "waiting push", <-pushed), "m1"); list != "accepted" {
		t.Fatalf("push: %v", o)
	}
	e.connect(t, "u1", "c1") // the slot is free again
}
