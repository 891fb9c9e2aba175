package httpapi

import "sync"

// userLimiter bounds the sync requests one user may have in flight in this
// process; a request over the bound is answered 429 retry_later.
type userLimiter struct {
	max int // 0 = unbounded

	mu       sync.Mutex
	inFlight map[string]int
}

// acquire takes a slot for user, or reports false when user has max in flight.
func (l *userLimiter) acquire(user string) bool {
	if l.max <= 0 {
		return true
	}
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
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight[user]--; l.inFlight[user] <= 0 {
		delete(l.inFlight, user)
	}
}
