package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/synchro-sync/synchro/internal/live"
)

// pullWait is how long a pull asking wait_ms may wait: 0 without one (or
// when the server has no live hub), capped at MaxPullWait.
func (s *Sync) pullWait(waitMs *int64) (time.Duration, *apiError) {
	switch {
	case waitMs == nil:
		return 0, nil
	case *waitMs < 0:
		return 0, badRequest("wait_ms must not be negative")
	case s.Live == nil:
		return 0, nil
	}
	return min(time.Duration(*waitMs)*time.Millisecond, s.MaxPullWait), nil
}

// livePull answers a pull that may wait up to wait for a change of scopes (a
// live pull): it pulls, and while the answer has nothing new for the client
// (quiet: no change, no scope to rebuild or remove, nothing more, the same
// scopes to add as the first answer offered) it waits, holding
// no database connection and none of the user's requests in flight, until a
// materialization commits a change of one of the scopes (or the stream, the
// scope assignment or the registry changes: every waiter is woken), then pulls
// again. At the deadline, when the client goes away or the server shuts down
// it answers the last pull (nothing new, the same cursors). Every answer is
// one an ordinary pull would give at that moment, refusals included.
func (s *Sync) livePull(ctx context.Context, user string, scopes []string, wait time.Duration,
	pull func() (json.RawMessage, *apiError)) (json.RawMessage, *apiError) {
	for _, sc := range scopes {
		if strings.Contains(sc, "\n") { // a notification names scopes one a line
			scopes = nil // wait for every notification
			break
		}
	}
	w, err := s.Live.Watch(user, scopes)
	if err != nil {
		if errors.Is(err, live.ErrStopped) {
			return pull()
		}
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: "retry_later",
			Message: fmt.Sprintf("too many pulls are waiting for changes; retry later (%v)", err), RetryAfter: 1}
	}
	defer s.Live.Done(w)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	slot := slotOf(ctx)
	var offered string // the first answer's scopes to add
	for n := 0; ; n++ {
		out, e := pull()
		if e != nil {
			return out, e
		}
		add, isQuiet := quiet(out)
		if n == 0 {
			offered = add
		}
		if !isQuiet || add != offered {
			return out, nil
		}
		slot.pause()
		select {
		case <-w.C:
		case <-deadline.C:
			return out, nil
		case <-s.Live.Stopped():
			return out, nil
		case <-ctx.Done():
			return out, nil
		}
		if !slot.resume() {
			return out, nil // the user's other requests hold every place: answer what was
		}
	}
}

// quiet reports whether a pull answer has no change, no scope to rebuild or
// remove and no further page, and returns its scopes to add (as JSON text: a
// client may leave an offered scope unrequested, which alone is nothing new).
func quiet(answer json.RawMessage) (add string, ok bool) {
	var a struct {
		Changes      []json.RawMessage `json:"changes"`
		Rebuild      []json.RawMessage `json:"rebuild"`
		HasMore      bool              `json:"has_more"`
		ScopeUpdates struct {
			Add    json.RawMessage   `json:"add"`
			Remove []json.RawMessage `json:"remove"`
		} `json:"scope_updates"`
	}
	if json.Unmarshal(answer, &a) != nil {
		return "", false
	}
	return string(a.ScopeUpdates.Add), len(a.Changes) == 0 && len(a.Rebuild) == 0 && !a.HasMore && len(a.ScopeUpdates.Remove) == 0
}
