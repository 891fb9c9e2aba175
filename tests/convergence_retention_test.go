package tests

// The retention horizon of the convergence simulation (TestConvergence): the
// pull history is pruned throughout the run to a horizon seconds behind the
// newest materialized transaction, so replicas that stay away longer find
// their cursors behind it, and laggard replicas have rebuild sessions
// overtaken by it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// simRetention is how far behind the newest materialized transaction the
	// simulation prunes the pull history, every simPruneInterval, as the
	// worker would with --history-retention. The simulation prunes by itself
	// (simPruner) rather than through the worker's PullHistoryRetention, so
	// that it counts the batches and what they removed, and tells a failure a
	// PostgreSQL restart explains from any other.
	simRetention     = 1500 * time.Millisecond
	simPruneInterval = 200 * time.Millisecond
	// simOfflineMin is the shortest time a laggard stays offline.
	simOfflineMin = 2 * simRetention
)

// simLaggards are the replicas (by index) that sync with pages of two rows,
// go offline for longer than the retention after some syncs (goOffline), and
// have a later page of some rebuild sessions held until the horizon passes the
// session (overtake).
var simLaggards = []int{3, 8}

// simPruner prunes the pull history on a goroutine of its own: every
// simPruneInterval a round of synchro.prune_history batches up to
// simRetention ago, as the worker's pruneHorizon does. Failures that a
// PostgreSQL restart or a lock explains are counted and the next round
// retries; any other is kept for the final checks.
type simPruner struct {
	stop             context.CancelFunc
	done             chan struct{}
	batches, removed atomic.Int64
	failed           atomic.Int64
	mu               sync.Mutex
	unexpected       []string
}

func (s *sim) startPruner() {
	ctx, cancel := context.WithCancel(context.Background())
	p := &simPruner{stop: cancel, done: make(chan struct{})}
	pool := s.e.d.Pool
	go func() {
		defer close(p.done)
		tick := time.NewTicker(simPruneInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for started := time.Now(); ctx.Err() == nil; {
				var txns, removed int64
				err := pool.QueryRow(ctx, `SELECT transactions, effects + versions + edges + digests FROM synchro.prune_history($1, 1000, $2)`,
					simRetention, started).Scan(&txns, &removed)
				if err != nil {
					p.failure(ctx, err)
					break
				}
				if txns == 0 {
					break
				}
				p.batches.Add(1)
				p.removed.Add(removed)
			}
		}
	}()
	s.t.Cleanup(p.halt)
	s.pruner = p
}

// halt stops the pruner and waits for it.
func (p *simPruner) halt() {
	p.stop()
	<-p.done
}

// failure records a failed batch: expected when PostgreSQL is down or
// restarting (a connection failure, 57P0x, 08xxx), a lock wait timed out
// (55P03) or a deadlock chose the batch (40P01); anything else is kept.
func (p *simPruner) failure(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	p.failed.Add(1)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code == "55P03" || pe.Code == "40P01" || pe.Code[:2] == "08" || pe.Code[:3] == "57P" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unexpected = append(p.unexpected, err.Error())
}

// requirePruned: the pruner met no unexpected failure, and pruning moved the
// active generation's horizon and removed history.
func (s *sim) requirePruned() {
	p := s.pruner
	p.halt()
	if len(p.unexpected) > 0 {
		s.t.Fatalf("history pruning failed: %v", p.unexpected)
	}
	s.stats["pruning: batches that moved the horizon"] = int(p.batches.Load())
	s.stats["pruning: rows removed"] = int(p.removed.Load())
	s.stats["pruning: failed batches (PostgreSQL down, lock timeouts)"] = int(p.failed.Load())
	h := horizon(s.t, s.e.d)
	s.logf("retention horizon of the active generation at the end: %s", h)
	if p.batches.Load() == 0 || p.removed.Load() == 0 || h == "0/0" {
		s.t.Fatalf("pruning never moved the horizon (batches %d, rows removed %d, active horizon %s): the run proves nothing about retention",
			p.batches.Load(), p.removed.Load(), h)
	}
}

// behindHorizon reports whether cursor cur can no longer resume because the
// retention horizon of its generation passed it: it stands before
// transaction_end(horizon) (synchro.read_scope_cursor).
func (s *sim) behindHorizon(cur simCursor) bool {
	return queryBool(s.t, s.e.d, `SELECT ($1::pg_lsn, $2::integer, $3::integer)
		< (synchro.history_horizon_lsn($4::uuid), 2147483647, 2147483647)`, cur.lsn, cur.event, cur.effect, cur.generation)
}

// offline reports whether c is a laggard away for now (its syncs are skipped).
func (c *simClient) offline() bool { return time.Now().Before(c.offlineUntil) }

// goOffline sends a laggard away, after half of its syncs, for longer than
// the retention: its cursors are behind the horizon when it is back.
func (s *sim) goOffline(c *simClient) {
	if !c.laggard || !s.chaos || s.rng.IntN(2) != 0 {
		return
	}
	away := simOfflineMin + time.Duration(s.rng.IntN(2000))*time.Millisecond
	c.offlineUntil, c.returning = time.Now().Add(away), true
	s.logf("%s: offline for %s", c.name, away)
	s.stats["laggards sent offline for longer than the retention"]++
}

// observe records, from an answer faultTransport got, the scopes the server
// put in rebuild (connect and pull) and rebuild sessions it expired (410
// rebuild_expired). It reads a 200 connect or pull answer, or a 410, whole and
// leaves it readable again.
func (f *faultTransport) observe(req *http.Request, res *http.Response) error {
	path := req.URL.Path
	if !(res.StatusCode == http.StatusOK && (path == "/sync/connect" || path == "/sync/pull") ||
		res.StatusCode == http.StatusGone && path == "/sync/rebuild") {
		return nil
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	res.Body = io.NopCloser(bytes.NewReader(raw))
	var body struct {
		Rebuild []string `json:"rebuild"`
		Error   struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) != nil {
		return nil // the SDK reports it
	}
	for _, scope := range body.Rebuild {
		f.listed[scope] = true
	}
	if body.Error.Code == "rebuild_expired" {
		f.s.stats["rebuild sessions expired (410 rebuild_expired)"]++
		f.s.logf("%s: a rebuild page answered 410 rebuild_expired", f.c.name)
	}
	return nil
}

// overtakeDue reports whether the next later page of a laggard's rebuild
// session (body: the request) is held until the horizon passes the session
// (overtake): during the chaos phase, once the step of the next one came,
// while the worker runs and neither PostgreSQL nor a reset is down or
// running (the horizon could not move).
func (f *faultTransport) overtakeDue(req *http.Request, body []byte) bool {
	s := f.s
	if req.URL.Path != "/sync/rebuild" || !f.c.laggard || !s.chaos || s.nextOvertake < 0 || s.step < s.nextOvertake ||
		!s.workerUp || s.pgDown || s.resetting != nil {
		return false
	}
	var r struct {
		Cursor *string `json:"cursor"`
	}
	return json.Unmarshal(body, &r) == nil && r.Cursor != nil
}

// overtake holds a laggard's rebuild session at a later page until the
// retention horizon passes it: a server write, materialized, then pruned
// once simRetention has passed. The page is answered 410 rebuild_expired and
// the SDK restarts the session. It runs on the SDK's goroutine while the
// driver waits in the Sync, and reports failures with Errorf.
func (f *faultTransport) overtake() error {
	s := f.s
	s.nextOvertake = s.step + 150 + s.rng.IntN(100)
	s.hook.arm("", 0) // no worker crash while the horizon must move
	s.logf("%s: a later page of its rebuild session is held until the retention horizon passes the session", f.c.name)
	ctx := context.Background()
	pool := s.e.d.Pool
	if _, err := pool.Exec(ctx, `INSERT INTO app.docs (id, owner_id, title, n) VALUES ($1, $2, 'overtakes a rebuild', 0)`, s.newID("d"), simOrphan); err != nil {
		return err
	}
	var target string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&target); err != nil {
		return err
	}
	err := waitUntil("the retention horizon to pass a held rebuild session", 60*time.Second, func() (bool, error) {
		var passed bool
		err := pool.QueryRow(ctx, `SELECT p.processed_end_lsn >= $1::pg_lsn AND synchro.history_horizon_lsn(p.stream_generation) >= p.materialized_commit_lsn
			FROM synchro.progress p`, target).Scan(&passed)
		return passed, err
	})
	if err != nil {
		s.t.Errorf("%s: %v", f.c.name, err)
		return err
	}
	s.stats["laggard rebuild sessions held until the horizon passed them"]++
	return nil
}

// requireRetentionExercised: the run pruned, sent cursors behind the horizon
// to rebuild (laggards back from offline among them) and expired rebuild
// sessions.
func (s *sim) requireRetentionExercised() {
	for _, need := range []string{
		"cursors behind the retention horizon rebuilt",
		"laggard cursors behind the horizon rebuilt after an offline period",
		"rebuild sessions expired (410 rebuild_expired)",
	} {
		if s.stats[need] == 0 {
			s.t.Fatalf("the run exercised no %s: the retention horizon proves nothing", need)
		}
	}
}

// isLaggard reports whether replica i is one of simLaggards.
func isLaggard(i int) bool { return slices.Contains(simLaggards, i) }

// horizonRebuilt counts, after a laggard's first sync back from offline, the
// n scopes it rebuilt because its cursors were behind the horizon.
func (s *sim) horizonRebuilt(c *simClient, n int) {
	if !c.returning {
		return
	}
	c.returning = false
	s.stats["laggard cursors behind the horizon rebuilt after an offline period"] += n
	s.logf("%s: back from offline, %d cursors behind the horizon rebuilt", c.name, n)
}
