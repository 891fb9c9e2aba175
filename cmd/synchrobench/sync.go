package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/auth"
)

// benchSecret signs the benchmark's tokens (HS256).
const benchSecret = "synchrobench-secret-0123456789abcdef"

// syncServer is a synchrod process serving a benchmark database.
type syncServer struct {
	base string
	cmd  *exec.Cmd
	http *http.Client
}

// startSynchrod builds and starts synchrod over url and waits until it is ready.
func startSynchrod(ctx context.Context, url, slot string, extra ...string) (*syncServer, error) {
	dir, err := os.MkdirTemp("", "synchrobench-bin-")
	if err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", dir, "./cmd/synchrod").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build synchrod: %v: %s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(filepath.Join(dir, "synchrod"), append([]string{"--database-url", url, "--listen", addr, "--slot", slot,
		"--max-user-requests", "15", "--max-page-size", "1000", "--capture-wait", "10s"}, extra...)...)
	cmd.Env = append(os.Environ(), "SYNCHRO_AUTH_MODE=jwt", "SYNCHRO_JWT_HS256_SECRET="+benchSecret)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &syncServer{base: "http://" + addr, cmd: cmd, http: &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000},
	}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := s.http.Get(s.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("synchrod did not become ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *syncServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// memory is a figure of synchrod's /proc status in MiB: "VmHWM" (peak
// resident) or "VmRSS" (resident now).
func (s *syncServer) memory(field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s", field)
}

// call posts body to path as user and decodes the 200 answer into out,
// retrying retryable refusals (429, 503) for up to 30 s as a client would.
func (s *syncServer) call(ctx context.Context, user, path string, body, out any) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		retry, err := s.callOnce(ctx, user, path, body, out)
		if !retry || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *syncServer) callOnce(ctx context.Context, user, path string, body, out any) (retry bool, err error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return false, err
	}
	tok, err := auth.MintHS256([]byte(benchSecret), "sub", user, time.Hour, time.Now())
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(raw))
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := s.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		retry := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
		return retry, fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
	}
	return false, json.Unmarshal(b, out)
}

type pullAnswer struct {
	Changes      []json.RawMessage `json:"changes"`
	ScopeCursors map[string]string `json:"scope_cursors"`
	HasMore      bool              `json:"has_more"`
}

type rebuildAnswer struct {
	Records          []json.RawMessage `json:"records"`
	Cursor           *string           `json:"cursor"`
	HasMore          bool              `json:"has_more"`
	FinalScopeCursor string            `json:"final_scope_cursor"`
}

// connectClient connects client as user and returns the scope's current cursor
// (an empty rebuild of it).
func (s *syncServer) connectClient(ctx context.Context, user, client string) (string, error) {
	var ignored map[string]any
	if err := s.call(ctx, user, "/sync/connect", map[string]any{"client_id": client, "protocol_version": 3}, &ignored); err != nil {
		return "", err
	}
	_, cursor, err := s.rebuild(ctx, user, client, "user:"+user, 1000)
	return cursor, err
}

// rebuild pages a whole scope and returns its rows and final scope cursor.
func (s *syncServer) rebuild(ctx context.Context, user, client, scope string, limit int) (int, string, error) {
	var cursor *string
	rows := 0
	for {
		var a rebuildAnswer
		if err := s.call(ctx, user, "/sync/rebuild", map[string]any{"client_id": client, "scope": scope, "cursor": cursor, "limit": limit}, &a); err != nil {
			return 0, "", err
		}
		rows += len(a.Records)
		if !a.HasMore {
			return rows, a.FinalScopeCursor, nil
		}
		cursor = a.Cursor
	}
}

func (s *syncServer) pull(ctx context.Context, user, client, scope, cursor string, limit int) (pullAnswer, error) {
	var a pullAnswer
	err := s.call(ctx, user, "/sync/pull", map[string]any{"client_id": client, "limit": limit,
		"scopes": map[string]any{scope: map[string]any{"cursor": cursor}}}, &a)
	return a, err
}

func percentiles(samples []time.Duration) (p50, p99 float64) {
	if len(samples) == 0 {
		return 0, 0
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	at := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) / 1000
	}
	return at(0.5), at(0.99)
}

// syncRun measures the sync API of a synchrod process: push throughput,
// pull page latency under 1,000 polling clients,
// another user's pull page p99 while one user attacks (issue 28, point 3),
// rebuild throughput of a 100,000-row scope and synchrod's peak memory, each
// beside a same-run baseline of plain SQL.
// With sdkOnly it measures the SDK's first sync alone.
func syncRun(ctx context.Context, adminURL string, seconds int, sdkOnly bool) ([]row, error) {
	url, pool, drop, err := benchDB(ctx, adminURL, "bench_sync")
	if err != nil {
		return nil, err
	}
	defer drop()
	srv, err := startSynchrod(ctx, url, "synchro_bench_sync")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	idle, err := srv.memory("VmRSS")
	if err != nil {
		return nil, err
	}
	if sdkOnly {
		return sdkBench(ctx, srv, pool)
	}
	var rows []row

	r, err := pushBench(ctx, srv, pool, seconds)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	rows = append(rows, r...)
	if r, err = pageBench(ctx, srv, pool, seconds); err != nil {
		return nil, fmt.Errorf("pull pages: %w", err)
	}
	rows = append(rows, r...)
	if r, err = attackBench(ctx, srv, pool, seconds); err != nil {
		return nil, fmt.Errorf("pull beside one user's attack: %w", err)
	}
	rows = append(rows, r...)
	if r, err = rebuildBench(ctx, srv, pool); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	rows = append(rows, r...)
	if r, err = sdkBench(ctx, srv, pool); err != nil {
		return nil, fmt.Errorf("SDK first sync: %w", err)
	}
	rows = append(rows, r...)
	peak, err := srv.memory("VmHWM")
	if err != nil {
		return nil, err
	}
	return append(rows, row{Name: "synchrod peak memory (VmHWM) after the sync runs", Value: peak, Unit: "MiB",
		Baseline: "synchrod idle after start", BaseVal: idle}), nil
}

// pushBench: 4 clients push 50-mutation insert batches for the given time, and
// the latency of each batch; baseline: 4 connections commit 50 single-row
// INSERTs per transaction into an unregistered table of the same shape.
func pushBench(ctx context.Context, srv *syncServer, pool *pgxpool.Pool, seconds int) ([]row, error) {
	const clients, batch = 4, 50
	progress("sync: push, %d clients x %d-mutation batches for %ds", clients, batch, seconds)
	ids := func(c, n, i int) int { return (c+1)*100_000_000 + n*batch + i }
	var pushed, plain stepTimes
	pushRate, err := ratePerSecond(clients, seconds, func(c int) (func(n int) (int, error), error) {
		user, client := fmt.Sprintf("pusher%d", c), fmt.Sprintf("push-client-%d", c)
		var ignored map[string]any
		if err := srv.call(ctx, user, "/sync/connect", map[string]any{"client_id": client, "protocol_version": 3}, &ignored); err != nil {
			return nil, err
		}
		return pushed.timed(func(n int) (int, error) {
			muts := make([]map[string]any, batch)
			for i := range muts {
				muts[i] = map[string]any{"mutation_id": strconv.Itoa(ids(c, n, i)), "table": "items", "op": "insert",
					"pk": map[string]any{"id": ids(c, n, i)}, "columns": map[string]any{"owner": user, "body": "payload"}}
			}
			var a struct{ Accepted []json.RawMessage }
			if err := srv.call(ctx, user, "/sync/push", map[string]any{"client_id": client, "mutations": muts}, &a); err != nil {
				return 0, err
			}
			if len(a.Accepted) != batch {
				return 0, fmt.Errorf("only %d of %d mutations applied", len(a.Accepted), batch)
			}
			return batch, nil
		}), nil
	})
	if err != nil {
		return nil, err
	}
	plainRate, err := ratePerSecond(clients, seconds, func(c int) (func(n int) (int, error), error) {
		return plain.timed(func(n int) (int, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return 0, err
			}
			defer tx.Rollback(ctx)
			for i := 0; i < batch; i++ {
				if _, err := tx.Exec(ctx, `INSERT INTO bench.plain_items VALUES ($1, 'u', 'payload')`, ids(c, n, i)); err != nil {
					return 0, err
				}
			}
			return batch, tx.Commit(ctx)
		}), nil
	})
	if err != nil {
		return nil, err
	}
	p50, p99 := percentiles(pushed.samples)
	b50, b99 := percentiles(plain.samples)
	return []row{
		{Name: fmt.Sprintf("push throughput (%d clients, %d-mutation batches)", clients, batch), Value: pushRate,
			Unit: "mutations/s", Baseline: "plain INSERT, same batches", BaseVal: plainRate, Target: ">= 5000"},
		{Name: "push batch latency p50", Value: p50, Unit: "ms", Baseline: "plain INSERT batch p50", BaseVal: b50},
		{Name: "push batch latency p99", Value: p99, Unit: "ms", Baseline: "plain INSERT batch p99", BaseVal: b99},
	}, nil
}

// stepTimes collects the durations of steps that run concurrently.
type stepTimes struct {
	mu      sync.Mutex
	samples []time.Duration
}

// timed wraps a step so that each call's duration is collected.
func (l *stepTimes) timed(step func(n int) (int, error)) func(n int) (int, error) {
	return func(n int) (int, error) {
		t0 := time.Now()
		got, err := step(n)
		l.mu.Lock()
		l.samples = append(l.samples, time.Since(t0))
		l.mu.Unlock()
		return got, err
	}
}

// ratePerSecond runs workers concurrently for the given time: each gets its step
// function from setup and calls it with n = 0, 1, ... until the time is up; it
// returns the steps' summed counts per second, or the first error.
func ratePerSecond(workers, seconds int, setup func(w int) (func(n int) (int, error), error)) (float64, error) {
	var mu sync.Mutex
	var total int
	var firstErr error
	var wg sync.WaitGroup
	end := time.Now().Add(time.Duration(seconds) * time.Second)
	t0 := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			step, err := setup(w)
			for n := 0; err == nil && time.Now().Before(end); n++ {
				var done int
				if done, err = step(n); err == nil {
					mu.Lock()
					total += done
					mu.Unlock()
				}
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	return float64(total) / time.Since(t0).Seconds(), firstErr
}

// visibilityBench: one connected client pulls in a tight loop while rows are
// committed directly every 20 ms; latency is commit to the pull that first
// returns the row (one clock, this process).
func visibilityBench(ctx context.Context, srv *syncServer, pool *pgxpool.Pool, seconds int) ([]row, error) {
	progress("sync: commit-to-pull-visible latency for %ds", seconds)
	const user, client = "watcher", "watch-client"
	cursor, err := srv.connectClient(ctx, user, client)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	committed := map[string]time.Time{}
	done := make(chan error, 1)
	go func() {
		end := time.Now().Add(time.Duration(seconds) * time.Second)
		for i := 0; time.Now().Before(end); i++ {
			id := 900_000_000 + i
			if _, err := pool.Exec(ctx, `INSERT INTO bench.items VALUES ($1, $2, 'visible')`, id, user); err != nil {
				done <- err
				return
			}
			mu.Lock()
			committed[strconv.Itoa(id)] = time.Now()
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
		done <- nil
	}()
	var samples []time.Duration
	writerDone := false
	for !writerDone || len(samples) < len(committed) {
		select {
		case err := <-done:
			if err != nil {
				return nil, err
			}
			writerDone = true
		default:
		}
		a, err := srv.pull(ctx, user, client, "user:"+user, cursor, 1000)
		if err != nil {
			return nil, err
		}
		seen := time.Now()
		for _, c := range a.Changes {
			var ch struct {
				PK struct{ ID json.Number } `json:"pk"`
			}
			if err := json.Unmarshal(c, &ch); err != nil {
				return nil, err
			}
			mu.Lock()
			at, ok := committed[ch.PK.ID.String()]
			mu.Unlock()
			if ok {
				samples = append(samples, seen.Sub(at))
			}
		}
		cursor = a.ScopeCursors["user:"+user]
	}
	p50, p99 := percentiles(samples)
	// Baseline: commit to the start of the materialization of the same
	// transactions (ledger timestamps; the ledger row is the first write).
	var m50, m99 float64
	if err := pool.QueryRow(ctx, `
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
		FROM (SELECT extract(epoch FROM t.materialized_at - t.commit_time) * 1000 AS ms
		      FROM synchro.txn_ledger t JOIN synchro.event_ledger e USING (stream_generation, commit_lsn)
		      WHERE e.key::bigint BETWEEN 900000000 AND 999999999) l`).Scan(&m50, &m99); err != nil {
		return nil, err
	}
	return []row{
		{Name: fmt.Sprintf("commit-to-pull-visible p50 (%d rows, tight polling)", len(samples)), Value: p50, Unit: "ms",
			Baseline: "commit-to-materialization-start p50", BaseVal: m50},
		{Name: "commit-to-pull-visible p99", Value: p99, Unit: "ms", Baseline: "commit-to-materialization-start p99", BaseVal: m99},
	}, nil
}

// pageBench: 1,000 connected clients poll their (quiet) scope every 10 s while
// one client pulls the same 500-change page of another scope repeatedly;
// baseline: a bare SELECT of the same 500 rows.
func pageBench(ctx context.Context, srv *syncServer, pool *pgxpool.Pool, seconds int) ([]row, error) {
	const pollers, page, pollEvery = 1000, 500, 10 * time.Second
	const user, pollUser = "reader", "poller"
	progress("sync: connecting %d polling clients", pollers)
	cursors := make([]string, pollers)
	for i := range cursors {
		c, err := srv.connectClient(ctx, pollUser, fmt.Sprintf("poller-%d", i))
		if err != nil {
			return nil, err
		}
		cursors[i] = c
	}
	measure, err := srv.connectClient(ctx, user, "page-client")
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench.items SELECT 800000000 + g, $1, repeat('x', 100) FROM generate_series(1, $2) g`, user, page); err != nil {
		return nil, err
	}
	if err := waitMaterialized(ctx, pool); err != nil {
		return nil, err
	}
	progress("sync: %d clients polling; pulling %d-change pages for %ds", pollers, page, seconds)
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range cursors {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tick := time.NewTicker(pollEvery)
			defer tick.Stop()
			time.Sleep(time.Duration(i) * pollEvery / pollers) // spread the polls
			for {
				if a, err := srv.pull(pctx, pollUser, fmt.Sprintf("poller-%d", i), "user:"+pollUser, cursors[i], page); err == nil {
					cursors[i] = a.ScopeCursors["user:"+pollUser]
				}
				select {
				case <-pctx.Done():
					return
				case <-tick.C:
				}
			}
		}(i)
	}
	// Each page through synchrod, then the same page from synchro.pull called
	// directly (the database round trip alone), under the same load.
	var samples, inSQL []time.Duration
	request := map[string]any{"client_id": "page-client", "scope_set_version": 0,
		"scopes": map[string]any{"user:" + user: map[string]any{"cursor": measure}}}
	end := time.Now().Add(time.Duration(seconds) * time.Second)
	for time.Now().Before(end) {
		t0 := time.Now()
		a, err := srv.pull(ctx, user, "page-client", "user:"+user, measure, page)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		if len(a.Changes) != page {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("page of %d changes, want %d", len(a.Changes), page)
		}
		samples = append(samples, time.Since(t0))
		t0 = time.Now()
		var answer []byte
		if err := pool.QueryRow(ctx, `SELECT synchro.pull($1, $2, $3, 8388608)::text`, user, request, page).Scan(&answer); err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		inSQL = append(inSQL, time.Since(t0))
	}
	cancel()
	wg.Wait()
	var base []time.Duration
	for i := 0; i < len(samples); i++ {
		t0 := time.Now()
		rows, err := pool.Query(ctx, `SELECT id, owner, body FROM bench.items WHERE owner = $1 ORDER BY id LIMIT 500`, user)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
		}
		rows.Close()
		if rows.Err() != nil {
			return nil, rows.Err()
		}
		base = append(base, time.Since(t0))
	}
	p50, p99 := percentiles(samples)
	b50, b99 := percentiles(base)
	s50, s99 := percentiles(inSQL)
	return []row{
		{Name: fmt.Sprintf("pull page p50 (%d changes, %d clients polling)", page, pollers), Value: p50, Unit: "ms", Baseline: "bare SELECT page p50", BaseVal: b50},
		{Name: "pull page p99", Value: p99, Unit: "ms", Baseline: "bare SELECT page p99", BaseVal: b99, Target: "<= 15"},
		{Name: "pull page in SQL alone p50 (synchro.pull called directly, same load)", Value: s50, Unit: "ms", Baseline: "bare SELECT page p50", BaseVal: b50},
		{Name: "pull page in SQL alone p99", Value: s99, Unit: "ms", Baseline: "bare SELECT page p99", BaseVal: b99},
	}, nil
}
