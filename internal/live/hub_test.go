package live

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func newTestHub(t *testing.T, max, maxUser int) *Hub {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return NewHub(pool, max, maxUser, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func signalled(w *Waiter) bool {
	select {
	case <-w.C:
		return true
	default:
		return false
	}
}

// A notification wakes exactly the waiters of the scopes it names (and those
// of every notification); "*" wakes all.
func TestWakeIsPrecise(t *testing.T) {
	h := newTestHub(t, 10, 10)
	u1, _ := h.Watch("u1", []string{"user:u1", "team:red"})
	u2, _ := h.Watch("u2", []string{"user:u2"})
	every, _ := h.Watch("u3", nil)
	h.wake("user:u2\nteam:blue")
	if signalled(u1) || !signalled(u2) || !signalled(every) {
		t.Fatalf("after a notification of user:u2 and team:blue: u1 %v, u2 %v, every %v", signalled(u1), signalled(u2), signalled(every))
	}
	h.wake("team:red")
	if !signalled(u1) || signalled(u2) {
		t.Fatal("a notification of team:red did not wake only the waiter of team:red")
	}
	h.wake("*")
	if !signalled(u1) || !signalled(u2) || !signalled(every) {
		t.Fatal("* did not wake every waiter")
	}
	h.Done(u1)
	h.wake("user:u1")
	if signalled(u1) {
		t.Fatal("a waiter that is done was woken")
	}
	if n := h.Waiting(); n != 2 {
		t.Fatalf("%d waiting, want 2", n)
	}
}

// The Hub admits at most max waiters, at most maxUser of one user; a waiter
// that is done frees its place.
func TestWatchBounds(t *testing.T) {
	h := newTestHub(t, 3, 2)
	a, _ := h.Watch("u1", []string{"s"})
	if _, err := h.Watch("u1", []string{"s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Watch("u1", []string{"s"}); !errors.Is(err, ErrFull) {
		t.Fatalf("a third waiter of u1: %v, want ErrFull", err)
	}
	if _, err := h.Watch("u2", []string{"s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Watch("u3", []string{"s"}); !errors.Is(err, ErrFull) {
		t.Fatalf("a fourth waiter: %v, want ErrFull", err)
	}
	h.Done(a)
	if _, err := h.Watch("u3", []string{"s"}); err != nil {
		t.Fatalf("after one was done: %v", err)
	}
}

// A Hub whose Run returned wakes every waiter and admits no new one.
func TestStoppedHubAnswersWaiters(t *testing.T) {
	h := newTestHub(t, 10, 10)
	w, _ := h.Watch("u1", []string{"user:u1"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.Run(ctx)
	if !signalled(w) {
		t.Fatal("the waiter was not woken when the hub stopped")
	}
	select {
	case <-h.Stopped():
	default:
		t.Fatal("Stopped is not closed")
	}
	if _, err := h.Watch("u1", []string{"user:u1"}); !errors.Is(err, ErrStopped) {
		t.Fatalf("a waiter after the stop: %v, want ErrStopped", err)
	}
}
