package httpapi

import (
	"context"
	"sync"
)

// userLimiter bounds the sync requests one user may have in flight in this
// process; a request over the bound is answered 429 retry_later.
type userLimiter struct {
	max int

	mu       sync.Mutex
	inFlight map[string]int
}

// userBound is the bound of requests one user may have in flight: configured
// (0: none configured), never more than the pool's size minus one, so that one
// user can never hold every connection of the pool, and at least one.
func userBound(configured int, poolSize int32) int {
	bound := max(int(poolSize)-1, 1)
	if configured > 0 {
		bound = min(configured, bound)
	}
	return bound
}

// acquire takes a slot for user, or reports false when user has max in flight.
func (l *userLimiter) acquire(user string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight == nil {
		l.inFlight = map[string]int{}
	}
	if l.inFlight[user] >= l.max {
		return false
	}
	l.inFlight[user]++
	return true
}

// release returns a slot taken by acquire.
func (l *userLimiter) release(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[user]--; l.inFlight[user] <= 0 {
		delete(l.inFlight, user)
	}
}

// byteBudget bounds the request body bytes all sync requests of the process
// may have in flight together (a request reserves its Content-Length, or the
// body cap when it gives none, before its body is read); a request over the
// budget is answered 503 retry_later.
type byteBudget struct {
	max int64 // 0 = unbounded

	mu   sync.Mutex
	used int64
}

// acquire reserves n bytes, or reports false when they do not fit. A request
// alone may always reserve up to the whole budget.
func (b *byteBudget) acquire(n int64) bool {
	if b.max <= 0 || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// release returns n bytes reserved by acquire.
func (b *byteBudget) release(n int64) {
	if b.max <= 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
}

// requestSlot is what a request holds of the limits while it runs: its place
// among its user's requests in flight and its body bytes. A pull that waits
// for changes holds neither while it waits (pause), and takes its user's place
// again to pull once woken (resume).
type requestSlot struct {
	users    *userLimiter
	bytes    *byteBudget
	user     string
	reserved int64
	held     bool // the user's place
}

// pause gives back the user's place and the body bytes.
func (r *requestSlot) pause() {
	if r.held {
		r.users.release(r.user)
		r.held = false
	}
	r.bytes.release(r.reserved)
	r.reserved = 0
}

// resume takes the user's place again, or reports false when the user has
// the most requests in flight.
func (r *requestSlot) resume() bool {
	if !r.held {
		r.held = r.users.acquire(r.user)
	}
	return r.held
}

// end gives back whatever the request still holds.
func (r *requestSlot) end() { r.pause() }

type slotKey struct{}

// slotOf is the request slot handle put in ctx.
func slotOf(ctx context.Context) *requestSlot {
	s, _ := ctx.Value(slotKey{}).(*requestSlot)
	return s
}
