package live

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channel is the notification channel materialization sends on.
const Channel = "synchro_changes"

// ErrFull refuses a waiter over the Hub's bounds (in all, or of one user).
var ErrFull = errors.New("live: too many waiting pulls")

// Hub wakes the waiters of the scopes each notification names.
type Hub struct {
	conn    *pgx.ConnConfig
	setup   func(context.Context, *pgx.Conn) error
	log     *slog.Logger
	max     int // waiters in all
	maxUser int // waiters of one user

	mu      sync.Mutex
	byScope map[string]map[*Waiter]struct{}
	every   map[*Waiter]struct{} // waiters of every notification
	perUser map[string]int
	n       int
	stopped chan struct{} // closed when Run returns
}

// Waiter is one waiting pull. C receives a value (it holds at most one) when
// a notification names one of its scopes, when the Hub may have missed
// notifications, or when it stops.
type Waiter struct {
	C      chan struct{}
	user   string
	scopes []string
}

// NewHub is a Hub that listens over a connection opened as pool's are (its
// connection configuration and AfterConnect, so with the same role), not
// taken from pool, and admits at most max waiters, at most maxUser of them
// one user's.
func NewHub(pool *pgxpool.Pool, max, maxUser int, log *slog.Logger) *Hub {
	return &Hub{conn: pool.Config().ConnConfig.Copy(), setup: pool.Config().AfterConnect, log: log, max: max, maxUser: maxUser,
		byScope: map[string]map[*Waiter]struct{}{}, every: map[*Waiter]struct{}{}, perUser: map[string]int{}, stopped: make(chan struct{})}
}

// Watch registers a waiter of user for scopes, or for every notification when
// scopes is nil (ErrFull over the bounds, ErrStopped once the Hub stopped).
// Register before the pull whose answer decides to wait, so that a change
// committed between the pull and the wait still wakes it. Done removes it.
func (h *Hub) Watch(user string, scopes []string) (*Waiter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.stopped:
		return nil, ErrStopped
	default:
	}
	if h.n >= h.max || h.perUser[user] >= h.maxUser {
		return nil, ErrFull
	}
	w := &Waiter{C: make(chan struct{}, 1), user: user, scopes: scopes}
	if scopes == nil {
		h.every[w] = struct{}{}
	}
	for _, s := range scopes {
		set := h.byScope[s]
		if set == nil {
			set = map[*Waiter]struct{}{}
			h.byScope[s] = set
		}
		set[w] = struct{}{}
	}
	h.n++
	h.perUser[user]++
	return w, nil
}

// ErrStopped refuses a waiter once the Hub stopped.
var ErrStopped = errors.New("live: stopped")

// Done removes w.
func (h *Hub) Done(w *Waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.every, w)
	for _, s := range w.scopes {
		if set := h.byScope[s]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(h.byScope, s)
			}
		}
	}
	h.n--
	if h.perUser[w.user]--; h.perUser[w.user] <= 0 {
		delete(h.perUser, w.user)
	}
}

// Waiting is how many waiters there are.
func (h *Hub) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Stopped is closed once the Hub stopped: waiting pulls answer.
func (h *Hub) Stopped() <-chan struct{} { return h.stopped }

// wake wakes the waiters of the scopes payload names ("*": every waiter).
func (h *Hub) wake(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.every {
		signal(w)
	}
	if payload == "*" {
		for _, set := range h.byScope {
			for w := range set {
				signal(w)
			}
		}
		return
	}
	for _, s := range strings.Split(payload, "\n") {
		for w := range h.byScope[s] {
			signal(w)
		}
	}
}

func signal(w *Waiter) {
	select {
	case w.C <- struct{}{}:
	default: // already signalled
	}
}

// retryInterval is how long the Hub waits before it connects again.
const retryInterval = time.Second

// Run listens until ctx ends, connecting again after a lost connection
// (waking every waiter: a notification may have been missed meanwhile). When
// it returns, every waiter is woken and no new one is admitted.
func (h *Hub) Run(ctx context.Context) {
	defer func() {
		h.mu.Lock()
		close(h.stopped)
		h.mu.Unlock()
		h.wake("*")
	}()
	for ctx.Err() == nil {
		err := h.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		h.log.Warn("live pull notifications lost; listening again", "error", err.Error(), "retry_in", retryInterval)
		h.wake("*")
		select {
		case <-ctx.Done():
			return
		case <-time.After(retryInterval):
		}
	}
}

// listen holds one LISTEN connection and wakes waiters until it fails.
func (h *Hub) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, h.conn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if h.setup != nil {
		if err := h.setup(ctx, conn); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	// Waiters that pulled before the connection listened may have missed a
	// change: they pull again.
	h.wake("*")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		h.wake(n.Payload)
	}
}
