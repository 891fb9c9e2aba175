package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// liveRun measures how soon a change reaches clients: commit-to-pull-visible
// with tight polling (visibilityBench), and commit-to-client of 1,000 clients
// long-polling their own scopes while a writer commits 200 transactions a
// second into random users' scopes, beside commit-to-materialized of the same
// transactions; then synchrod's memory and database connections with 1,000
// and with 10,000 waiting clients.
func liveRun(ctx context.Context, adminURL string, seconds int) ([]row, error) {
	url, pool, drop, err := benchDB(ctx, adminURL, "bench_live")
	if err != nil {
		return nil, err
	}
	defer drop()
	srv, err := startSynchrod(ctx, url, "synchro_bench_live", "--max-connections", "12000")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	idle, err := srv.memory("VmRSS")
	if err != nil {
		return nil, err
	}
	idleConns, err := synchrodConns(ctx, pool)
	if err != nil {
		return nil, err
	}
	rows, err := visibilityBench(ctx, srv, pool, seconds)
	if err != nil {
		return nil, fmt.Errorf("pull-visible latency: %w", err)
	}

	const writeRate = 200
	pullers := &livePullers{srv: srv, committed: map[int64]time.Time{}}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := pullers.start(pctx, 0, 1000); err != nil {
		return nil, err
	}
	if err := srv.waitWaiting(ctx, 1000); err != nil {
		return nil, err
	}
	before, err := srv.batchStats(ctx)
	if err != nil {
		return nil, err
	}
	progress("live: 1000 clients wait; writing %d tx/s into random users' scopes for %ds", writeRate, seconds)
	var ids []int64
	tick := time.NewTicker(time.Second / writeRate)
	for end := time.Now().Add(time.Duration(seconds) * time.Second); time.Now().Before(end); {
		<-tick.C
		id := int64(800_000_000 + len(ids))
		if _, err := pool.Exec(ctx, `INSERT INTO bench.items VALUES ($1, $2, 'live')`, id, liveUser(rand.IntN(1000))); err != nil {
			tick.Stop()
			return nil, err
		}
		pullers.committedAt(id, time.Now())
		ids = append(ids, id)
	}
	tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for pullers.seen() < len(ids) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("clients received %d of %d changes", pullers.seen(), len(ids))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := pullers.failure(); err != nil {
		return nil, err
	}
	p50, p99 := percentiles(pullers.latencies())
	after, err := srv.batchStats(ctx)
	if err != nil {
		return nil, err
	}
	batches := max(after.batches-before.batches, 1)
	var m50, m99 float64
	if err := pool.QueryRow(ctx, `
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
		FROM (SELECT extract(epoch FROM t.materialized_at - t.commit_time) * 1000 AS ms
		      FROM synchro.txn_ledger t JOIN synchro.event_ledger e USING (stream_generation, commit_lsn)
		      WHERE e.key::bigint BETWEEN 800000000 AND 899999999) l`).Scan(&m50, &m99); err != nil {
		return nil, err
	}
	rows = append(rows,
		row{Name: "live commit-to-client p50", Value: p50, Unit: "ms", Baseline: "commit-to-materialization-start p50", BaseVal: m50, Target: "<= 15"},
		row{Name: "live commit-to-client p99", Value: p99, Unit: "ms", Baseline: "commit-to-materialization-start p99", BaseVal: m99, Target: "<= 60"},
		row{Name: "live: worker batch duration, mean (prepare, materialize, acknowledge)", Value: (after.seconds - before.seconds) * 1000 / batches,
			Unit: "ms", Baseline: "live commit-to-client p50", BaseVal: p50},
		row{Name: "live: transactions per worker batch, mean", Value: (after.txns - before.txns) / batches, Unit: "tx"})

	for _, n := range []int{1000, 10000} {
		if n > 1000 {
			progress("live: %d clients more wait", n-1000)
			if err := pullers.start(pctx, 1000, n); err != nil {
				return nil, err
			}
		}
		if err := srv.waitWaiting(ctx, n); err != nil {
			return nil, err
		}
		mem, err := srv.memory("VmRSS")
		if err != nil {
			return nil, err
		}
		conns, err := synchrodConns(ctx, pool)
		if err != nil {
			return nil, err
		}
		target := ""
		if n == 10000 {
			target = "< 500"
		}
		rows = append(rows,
			row{Name: fmt.Sprintf("synchrod memory (VmRSS), %d clients waiting", n), Value: mem, Unit: "MiB",
				Baseline: "synchrod idle after start", BaseVal: idle, Target: target},
			row{Name: fmt.Sprintf("synchrod database connections, %d clients waiting", n), Value: float64(conns), Unit: "conns",
				Baseline: "synchrod idle after start", BaseVal: float64(idleConns)})
	}
	stop()
	return rows, pullers.wait()
}

func liveUser(i int) string { return fmt.Sprintf("live%05d", i) }

// livePullers are clients that long-poll their own scope (user:<liveUser>)
// in a loop, recording when each change of bench.items reaches them.
type livePullers struct {
	srv *syncServer
	wg  sync.WaitGroup

	mu        sync.Mutex
	committed map[int64]time.Time // change id -> its commit (as the writer saw it)
	arrived   []time.Duration
	err       error
}

func (p *livePullers) committedAt(id int64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.committed[id] = at
}

func (p *livePullers) seen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.arrived)
}

func (p *livePullers) latencies() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.arrived...)
}

func (p *livePullers) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// wait waits for every puller to end (after their context ended).
func (p *livePullers) wait() error {
	p.wg.Wait()
	return p.failure()
}

// start connects clients from..to-1 (16 at a time) and starts each one's
// long-poll loop, which runs until ctx ends.
func (p *livePullers) start(ctx context.Context, from, to int) error {
	cursors := make([]string, to-from)
	work := make(chan int, to-from)
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			var first error
			for i := range work {
				if first != nil {
					continue
				}
				cursors[i-from], first = p.srv.connectClient(ctx, liveUser(i), "c-"+liveUser(i))
			}
			errs <- first
		}()
	}
	var err error
	for range 16 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return fmt.Errorf("connect live clients: %w", err)
	}
	for i := from; i < to; i++ {
		p.wg.Add(1)
		go p.loop(ctx, liveUser(i), cursors[i-from])
	}
	return nil
}

func (p *livePullers) loop(ctx context.Context, user, cursor string) {
	defer p.wg.Done()
	scope := "user:" + user
	for ctx.Err() == nil {
		var a pullAnswer
		err := p.srv.call(ctx, user, "/sync/pull", map[string]any{"client_id": "c-" + user, "limit": 1000, "wait_ms": 30000,
			"scopes": map[string]any{scope: map[string]any{"cursor": cursor}}}, &a)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.mu.Lock()
			p.err = fmt.Errorf("live pull of %s: %w", user, err)
			p.mu.Unlock()
			return
		}
		at := time.Now()
		p.mu.Lock()
		for _, c := range a.Changes {
			var ch struct {
				PK struct{ ID json.Number } `json:"pk"`
			}
			if json.Unmarshal(c, &ch) == nil {
				id, _ := strconv.ParseInt(ch.PK.ID.String(), 10, 64)
				if t, ok := p.committed[id]; ok {
					p.arrived = append(p.arrived, at.Sub(t))
				}
			}
		}
		p.mu.Unlock()
		cursor = a.ScopeCursors[scope]
	}
}

// waitWaiting waits until synchrod reports n pulls waiting (its
// synchro_waiting_pulls metric).
func (s *syncServer) waitWaiting(ctx context.Context, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := s.metric(ctx, "synchro_waiting_pulls")
		if err != nil {
			return err
		}
		if got >= float64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fewer than %d pulls wait after 2 minutes", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metric reads one unlabelled sample (a gauge, or a histogram's _sum or
// _count) from synchrod's /metrics; 0 when it is not exported yet.
func (s *syncServer) metric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, nil
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// batchStats is the sum and count of synchrod's batch duration histogram and
// the sum of its transactions-per-batch histogram.
type batchStats struct{ seconds, batches, txns float64 }

func (s *syncServer) batchStats(ctx context.Context) (batchStats, error) {
	var b batchStats
	for name, dst := range map[string]*float64{"synchro_batch_duration_seconds_sum": &b.seconds,
		"synchro_batch_duration_seconds_count": &b.batches, "synchro_batch_transactions_sum": &b.txns} {
		v, err := s.metric(ctx, name)
		if err != nil {
			return b, err
		}
		*dst = v
	}
	return b, nil
}

// synchrodConns is how many backends serve the bench database besides the
// benchmark's own pool: synchrod's connections (its replication connection
// included).
func synchrodConns(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&n)
	return n - int(pool.Stat().TotalConns()), err
}
