package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/logging"
	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/wal"
)

type row struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Baseline string  `json:"baseline,omitempty"`
	BaseVal  float64 `json:"baseline_value,omitempty"`
	Target   string  `json:"target,omitempty"`
}

func main() {
	url := flag.String("database-url", os.Getenv("SYNCHRO_DATABASE_URL"), "superuser URL of a scratch cluster")
	seconds := flag.Int("seconds", 10, "duration of each pgbench run")
	pgbin := flag.String("pg-bin", "", "directory of pgbench (default: newest /usr/lib/postgresql/*/bin)")
	jsonOut := flag.String("json", "", "also write the table as JSON to this file")
	only := flag.String("only", "", "run only the capture (or only its latency, or only its rate for writes to relations rules read), the fence cost, the sync, the live (change to client), the SDK, the stream reset, the history retention or the projection bootstrap measures: capture, latency, reads, fence, sync, live, sdk, reset, retention, bootstrap")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process (it runs the capture worker and the reset and bootstrap coordinators) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "synchrobench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(context.Background(), *url, *seconds, *pgbin, *jsonOut, *only); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "synchrobench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, adminURL string, seconds int, pgbin, jsonOut, only string) error {
	if adminURL == "" {
		return fmt.Errorf("pass --database-url")
	}
	if pgbin == "" {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
		if len(matches) == 0 {
			return fmt.Errorf("pgbench not found; pass --pg-bin")
		}
		pgbin = filepath.Dir(matches[len(matches)-1])
	}
	var rows []row
	if only == "" || only == "capture" || only == "latency" {
		if only != "latency" {
			r, err := captureRuns(ctx, adminURL, pgbin, seconds)
			if err != nil {
				return err
			}
			rows = append(rows, r...)
		}
		r, err := latencyRun(ctx, adminURL, pgbin, seconds)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		rows = append(rows, r...)
	}
	if only == "" || only == "fence" {
		r, err := fenceRun(ctx, adminURL, pgbin, seconds)
		if err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		rows = append(rows, r...)
	}
	if only == "" || only == "reads" {
		r, err := readsRun(ctx, adminURL, pgbin, seconds)
		if err != nil {
			return fmt.Errorf("reads: %w", err)
		}
		rows = append(rows, r...)
	}
	if only == "" || only == "sync" || only == "sdk" {
		r, err := syncRun(ctx, adminURL, seconds, only == "sdk")
		if err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		rows = append(rows, r...)
	}
	if only == "" || only == "live" {
		r, err := liveRun(ctx, adminURL, seconds)
		if err != nil {
			return fmt.Errorf("live: %w", err)
		}
		rows = append(rows, r...)
	}
	if only == "" || only == "reset" {
		r, err := resetRun(ctx, adminURL)
		if err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		rows = append(rows, r...)
	}
	if only == "" || only == "retention" {
		r, err := retentionRun(ctx, adminURL)
		if err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		rows = append(rows, r...)
	}
	if only == "" || only == "bootstrap" {
		r, err := bootstrapRun(ctx, adminURL)
		if err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
		rows = append(rows, r...)
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tVALUE\tUNIT\tBASELINE (same run)\tRATIO\tTARGET")
	for _, r := range rows {
		ratio := "-"
		if r.BaseVal > 0 {
			ratio = fmt.Sprintf("%.2f", r.Value/r.BaseVal)
		}
		base := "-"
		if r.Baseline != "" {
			base = fmt.Sprintf("%s %.1f", r.Baseline, r.BaseVal)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%s\t%s\n", r.Name, r.Value, r.Unit, base, ratio, orDash(r.Target))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if jsonOut != "" {
		b, _ := json.MarshalIndent(rows, "", "  ")
		return os.WriteFile(jsonOut, b, 0o644)
	}
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// benchDB creates a fresh migrated database with one registered table. drop
// closes the pool and drops the database and its replication slots, so that a
// run against a long-lived server leaves no slot that retains WAL.
func benchDB(ctx context.Context, adminURL, name string) (url string, pool *pgxpool.Pool, drop func(), err error) {
	if err := dropBenchDB(ctx, adminURL, name); err != nil {
		return "", nil, nil, err
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, nil, err
	}
	cfg, _ := pgx.ParseConfig(adminURL)
	url = strings.Replace(adminURL, "/"+cfg.Database, "/"+name, 1)
	if _, err := migrate.Apply(ctx, url, "synchro", slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return "", nil, nil, err
	}
	if pool, err = pgxpool.New(ctx, url); err != nil {
		return "", nil, nil, err
	}
	drop = func() {
		pool.Close()
		if err := dropBenchDB(context.Background(), adminURL, name); err != nil {
			progress("could not drop %s: %v", name, err)
		}
	}
	_, err = pool.Exec(ctx, `CREATE SCHEMA bench;
		CREATE SEQUENCE bench.seq;
		CREATE TABLE bench.items (id bigint PRIMARY KEY, owner text NOT NULL, body text);
		CREATE TABLE bench.plain_items (id bigint PRIMARY KEY, owner text NOT NULL, body text);
		SELECT synchro.register_table('bench.items', '{"kind":"column","template":"user:{owner}"}')`)
	if err != nil {
		drop()
		return "", nil, nil, err
	}
	return url, pool, drop, nil
}

// dropBenchDB drops database name, if it exists, with its replication slots.
func dropBenchDB(ctx context.Context, adminURL, name string) error {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	// A worker just stopped may leave its walsender behind (one decoding a
	// large transaction notices the closed connection only when it sends):
	// its slot stays active until it ends, so it is ended.
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		_, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		if err == nil {
			break
		}
		if attempt == 100 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	return err
}

// dropSlot drops replication slot name. The WAL sender of a reader that just
// closed its connection may not have ended yet (on a loaded host it takes a
// moment), and its slot stays active until it does: the drop is retried for
// up to 10 s while the slot is in use.
func dropSlot(ctx context.Context, pool *pgxpool.Pool, name string) error {
	for attempt := 0; ; attempt++ {
		_, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, name)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt == 100 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func workerConfig(url string) wal.Config {
	cfg, _ := pgx.ParseConfig(url)
	var out io.Writer = io.Discard
	if os.Getenv("SYNCHRO_LOG_LEVEL") == "debug" {
		out = os.Stderr
	}
	return wal.Config{DatabaseURL: url, Slot: "synchro_" + cfg.Database, Publication: "synchro", WorkerID: "bench",
		Log: logging.NewAt(out, slog.LevelDebug)}
}

// startWorker runs a worker until the returned stop is called.
func startWorker(url string, pool *pgxpool.Pool) func() {
	return startWorkerConfig(workerConfig(url), pool)
}

// startWorkerConfig runs a worker of configuration cfg until the returned stop
// is called.
func startWorkerConfig(cfg wal.Config, pool *pgxpool.Pool) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = wal.New(cfg, pool).Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

func waitFor(ctx context.Context, pool *pgxpool.Pool, query string, args ...any) error {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		var ok bool
		if err := pool.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("timed out: %s", query)
}

// waitMaterialized waits until every write fence has its event-ledger entry:
// the worker has materialized every fenced write committed so far.
func waitMaterialized(ctx context.Context, pool *pgxpool.Pool) error {
	return waitFor(ctx, pool, `SELECT NOT EXISTS (SELECT FROM synchro.fence f WHERE NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id))`)
}
