package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/logging"
	"github.com/synchro-sync/synchro/internal/reset"
)

// resetRelation is one registered relation of the reset benchmark: its
// columns (the baseline's bare COPY reads them), how many rows it holds and
// the INSERT ... SELECT that writes rows $1 through $2.
type resetRelation struct {
	name, columns string
	rows          int
	insert        string
}

// resetRelations hold 1,000,000 rows in all: a column-rule table, a
// column-rule table with an excluded column, a path-rule table and the
// dependency parent its path goes through.
var resetRelations = []resetRelation{
	{"bench.orgs", "id, name", 1_000,
		`INSERT INTO bench.orgs SELECT 'org' || g, 'organisation ' || g FROM generate_series($1::int, $2::int) g`},
	{"bench.items", "id, owner, body", 400_000,
		`INSERT INTO bench.items SELECT g, 'u' || (g % 1000), repeat('x', 60) FROM generate_series($1::int, $2::int) g`},
	{"bench.notes", "id, owner, title, n, secret, at", 300_000,
		`INSERT INTO bench.notes SELECT g, 'u' || (g % 1000), 'note ' || g, g % 97, md5(g::text), timestamptz '2026-01-01' + g * interval '1 second'
		 FROM generate_series($1::int, $2::int) g`},
	{"bench.docs", "id, org_id, body", 299_000,
		`INSERT INTO bench.docs SELECT g, 'org' || (1 + g % 1000), repeat('d', 80) FROM generate_series($1::int, $2::int) g`},
}

// resetRun builds a stream of 1,000,000 fenced rows in four registered
// relations (the worker stopped after creating the stream, so that none of it
// is materialized: the reset's baseline covers every fence), then runs a
// stream reset to activation while a writer commits 200 one-row transactions
// a second. It reports the staging rate beside a bare COPY of the same rows
// in the same run, how staging splits between the Go copy and the SQL
// completion, the staged catch-up's rate and the verification's duration.
func resetRun(ctx context.Context, adminURL string) ([]row, error) {
	url, pool, drop, err := benchDB(ctx, adminURL, "bench_reset")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE bench.notes (id bigint PRIMARY KEY, owner text NOT NULL, title text, n int, secret text, at timestamptz);
		CREATE TABLE bench.orgs (id text PRIMARY KEY, name text);
		CREATE TABLE bench.docs (id bigint PRIMARY KEY, org_id text NOT NULL REFERENCES bench.orgs, body text);
		SELECT synchro.register_table('bench.notes', '{"kind":"column","template":"user:{owner}"}', '{"exclude_columns":["secret"]}');
		SELECT synchro.register_table('bench.docs', '{"kind":"path","path":["org_id"],"template":"org:{id}"}')`); err != nil {
		return nil, err
	}
	// The stream (slot, progress row), then no worker: the stream stays where
	// it is, as a blocked one would.
	stop := startWorker(url, pool)
	if err := waitFor(ctx, pool, `SELECT EXISTS (SELECT FROM synchro.progress)`); err != nil {
		stop()
		return nil, err
	}
	stop()

	// The load, in transactions of up to 100,000 rows: the dependency parent
	// first, then the rest on two connections (the fence trigger's cost per
	// row is the load's).
	type chunk struct {
		rel      resetRelation
		from, to int
	}
	var chunks []chunk
	for _, rel := range resetRelations {
		for from := 1; from <= rel.rows; from += 100_000 {
			chunks = append(chunks, chunk{rel, from, min(from+100_000-1, rel.rows)})
		}
	}
	t0 := time.Now()
	load := func(c chunk) error {
		if _, err := pool.Exec(ctx, c.rel.insert, c.from, c.to); err != nil {
			return fmt.Errorf("load %s: %w", c.rel.name, err)
		}
		return nil
	}
	if err := load(chunks[0]); err != nil { // bench.orgs, which bench.docs references
		return nil, err
	}
	queue := make(chan chunk, len(chunks))
	for _, c := range chunks[1:] {
		queue <- c
	}
	close(queue)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for c := range queue {
				if err := load(c); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	total := 0
	for _, rel := range resetRelations {
		total += rel.rows
	}
	progress("reset: %d rows loaded in %s", total, time.Since(t0).Round(time.Millisecond))
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return nil, err
	}

	// Baseline: the same rows of every registered relation read by a bare
	// COPY ... TO STDOUT, in text (as the baseline reads them).
	t0 = time.Now()
	copied, err := bareCopy(ctx, url)
	if err != nil {
		return nil, err
	}
	copyRate := float64(copied) / time.Since(t0).Seconds()
	progress("reset: bare COPY of %d rows at %.0f rows/s; resetting with a writer at %d tx/s", copied, copyRate, resetWriterRate)

	w := startBenchWriter(ctx, pool)
	var mu sync.Mutex
	at := map[reset.Point]time.Time{}
	var relationsDone []time.Time
	var out io.Writer = io.Discard
	if os.Getenv("SYNCHRO_LOG_LEVEL") == "debug" {
		out = os.Stderr
	}
	cfg := reset.Config{DatabaseURL: url, Activate: true, Reason: "synchrobench",
		Log: logging.NewAt(out, slog.LevelInfo),
		AfterPoint: func(p reset.Point) error {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			if p == reset.PointStaging {
				relationsDone = append(relationsDone, now)
			}
			if _, ok := at[p]; !ok {
				at[p] = now
			}
			return nil
		}}
	started := time.Now()
	res, err := reset.Run(ctx, cfg)
	resetDur := time.Since(started)
	written, werr := w.stop()
	if err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	if werr != nil {
		return nil, fmt.Errorf("writer: %w", werr)
	}
	if res.Phase != "activated" {
		return nil, fmt.Errorf("reset ended %s, want activated", res.Phase)
	}
	var staged, caughtUp int64
	if err := pool.QueryRow(ctx, `SELECT rows_staged, txns_caught_up FROM synchro.reset_status WHERE reset_id = $1`,
		res.ResetID).Scan(&staged, &caughtUp); err != nil {
		return nil, err
	}
	if staged < int64(total) {
		return nil, fmt.Errorf("the reset staged %d rows, fewer than the %d loaded", staged, total)
	}
	for _, p := range []reset.Point{reset.PointSlotCreated, reset.PointBaselined, reset.PointCaughtUp, reset.PointReady} {
		if at[p].IsZero() {
			return nil, fmt.Errorf("the reset never passed %s", p)
		}
	}
	if len(relationsDone) != len(resetRelations) {
		return nil, fmt.Errorf("the reset staged %d relations, want %d", len(relationsDone), len(resetRelations))
	}
	stagingDur := at[reset.PointBaselined].Sub(at[reset.PointSlotCreated])
	copyDur := relationsDone[len(relationsDone)-1].Sub(at[reset.PointSlotCreated])
	sqlDur := at[reset.PointBaselined].Sub(relationsDone[len(relationsDone)-1])
	catchUpDur := at[reset.PointCaughtUp].Sub(at[reset.PointBaselined])
	verifyDur := at[reset.PointReady].Sub(at[reset.PointCaughtUp])
	progress("reset: staged %d rows in %s (Go copy %s, SQL stage_baseline and commit %s); caught up %d tx in %s; %d writes during the reset (%s in all)",
		staged, stagingDur.Round(time.Millisecond), copyDur.Round(time.Millisecond), sqlDur.Round(time.Millisecond),
		caughtUp, catchUpDur.Round(time.Millisecond), written, resetDur.Round(time.Millisecond))
	stagingRate := float64(staged) / stagingDur.Seconds()
	floor, err := stagingFloor(ctx, pool, staged)
	if err != nil {
		return nil, err
	}
	return []row{
		{Name: fmt.Sprintf("reset staging (%d relations, %d rows)", len(resetRelations), staged), Value: stagingRate, Unit: "rows/s",
			Baseline: "bare COPY TO STDOUT", BaseVal: copyRate, Target: ">= 100000"},
		{Name: "reset staging: Go fetch+render+COPY", Value: float64(staged) / copyDur.Seconds(), Unit: "rows/s",
			Baseline: "bare COPY TO STDOUT", BaseVal: copyRate},
		{Name: "reset staging: SQL versions, memberships, digests, coverage + commit", Value: sqlDur.Seconds(), Unit: "s",
			Baseline: "whole staging", BaseVal: stagingDur.Seconds()},
		{Name: "reset staging floor: bare INSERT ... SELECT of the staged projections, versions and memberships", Value: floor,
			Unit: "rows/s", Baseline: "bare COPY TO STDOUT", BaseVal: copyRate},
		{Name: fmt.Sprintf("reset catch-up (%d tx to the barrier)", caughtUp), Value: float64(caughtUp) / catchUpDur.Seconds(), Unit: "tx/s",
			Baseline: "writer during the reset", BaseVal: float64(written) / resetDur.Seconds()},
		{Name: "reset verification (synchro.verify_reset)", Value: verifyDur.Seconds(), Unit: "s"},
		{Name: fmt.Sprintf("reset, begin to activation (%d rows)", staged), Value: resetDur.Seconds(), Unit: "s"},
	}, nil
}

// stagingFloor is the rate (staged rows a second) at which the database
// alone writes what a baseline must: the active generation's projections,
// row versions and membership edges copied under another generation by
// bare INSERT ... SELECT statements (no rule evaluation, no rendering), in a
// transaction rolled back. Staging cannot be faster than this on the machine.
func stagingFloor(ctx context.Context, pool *pgxpool.Pool, staged int64) (float64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	t0 := time.Now()
	for _, q := range []string{
		`INSERT INTO synchro.projection (stream_generation, relation_id, key, image)
		 SELECT $1, j.relation_id, j.key, j.image FROM synchro.projection j JOIN synchro.progress p USING (stream_generation)`,
		`INSERT INTO synchro.row_version (version, table_id, key, image, checksum, stream_generation, commit_lsn, event_ordinal)
		 SELECT v.version, v.table_id, v.key, v.image, v.checksum, $1, v.commit_lsn, v.event_ordinal
		 FROM synchro.row_version v JOIN synchro.progress p USING (stream_generation)`,
		`INSERT INTO synchro.membership (stream_generation, scope, table_id, key, from_lsn)
		 SELECT $1, m.scope, m.table_id, m.key, m.from_lsn FROM synchro.membership m JOIN synchro.progress p USING (stream_generation)
		 WHERE m.to_lsn IS NULL`,
	} {
		if _, err := tx.Exec(ctx, q, "00000000-0000-0000-0000-00000000f100"); err != nil {
			return 0, fmt.Errorf("staging floor: %w", err)
		}
	}
	return float64(staged) / time.Since(t0).Seconds(), nil
}

// bareCopy reads every benchmark relation's rows with COPY (SELECT ...) TO
// STDOUT in one repeatable-read transaction and returns how many it read.
func bareCopy(ctx context.Context, url string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var n int64
	for _, rel := range resetRelations {
		tag, err := tx.Conn().PgConn().CopyTo(ctx, io.Discard, fmt.Sprintf("COPY (SELECT %s FROM %s) TO STDOUT", rel.columns, rel.name))
		if err != nil {
			return 0, err
		}
		n += tag.RowsAffected()
	}
	return n, tx.Commit(ctx)
}

// resetWriterRate is the pace of the writer that commits during the reset.
const resetWriterRate = 200

// benchWriter commits one-row transactions at resetWriterRate, alternating an
// INSERT into bench.items and an UPDATE of a bench.notes row, until stopped.
type benchWriter struct {
	cancel  context.CancelFunc
	done    chan struct{}
	written int
	err     error
}

func startBenchWriter(ctx context.Context, pool *pgxpool.Pool) *benchWriter {
	ctx, cancel := context.WithCancel(ctx)
	w := &benchWriter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Second / resetWriterRate)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var err error
			if i%2 == 0 {
				_, err = pool.Exec(ctx, `INSERT INTO bench.items VALUES ($1::bigint, 'u' || ($1::bigint % 1000), 'written during the reset')`, 10_000_000+i)
			} else {
				_, err = pool.Exec(ctx, `UPDATE bench.notes SET title = 'updated during the reset', n = n + 1 WHERE id = $1`, 1+(i*7919)%300_000)
			}
			if err != nil {
				if ctx.Err() == nil {
					w.err = err
				}
				return
			}
			w.written++
		}
	}()
	return w
}

// stop stops the writer and returns how many transactions it committed.
func (w *benchWriter) stop() (int, error) {
	w.cancel()
	<-w.done
	return w.written, w.err
}
