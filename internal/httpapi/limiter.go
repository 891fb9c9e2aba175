package httpapi

import "sync"

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
