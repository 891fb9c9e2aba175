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
	notesRelation(300_000),
	{"bench.docs", "id, org_id, body", 299_000,
		`INSERT INTO bench.docs SELECT g, 'org' || (1 + g % 1000), repeat('d', 80) FROM generate_series($1::int, $2::int) g`},
}

// notesRelation is bench.notes holding rows rows of 1,000 owners: a
// column-rule table with an excluded column (notesTable, registerNotes).
func notesRelation(rows int) resetRelation {
	return resetRelation{"bench.notes", "id, owner, title, n, secret, at", rows,
		`INSERT INTO bench.notes SELECT g, 'u' || (g % 1000), 'note ' || g, g % 97, md5(g::text), timestamptz '2026-01-01' + g * interval '1 second'
		 FROM generate_series($1::int, $2::int) g`}
}

const (
	notesTable    = `CREATE TABLE bench.notes (id bigint PRIMARY KEY, owner text NOT NULL, title text, n int, secret text, at timestamptz)`
	registerNotes = `SELECT synchro.register_table('bench.notes', '{"kind":"column","template":"user:{owner}"}', '{"exclude_columns":["secret"]}')`
)

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
	if _, err := pool.Exec(ctx, notesTable+`;
		CREATE TABLE bench.orgs (id text PRIMARY KEY, name text);
		CREATE TABLE bench.docs (id bigint PRIMARY KEY, org_id text NOT NULL REFERENCES bench.orgs, body text);
		`+registerNotes+`;
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

	total, err := loadRelations(ctx, pool, resetRelations)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return nil, err
	}

	// Baseline: the same rows of every registered relation read by a bare
	// COPY ... TO STDOUT, in text (as the baseline reads them).
	copied, copyRate, err := bareCopy(ctx, url, resetRelations)
	if err != nil {
		return nil, err
	}
	progress("reset: bare COPY of %d rows at %.0f rows/s; resetting with a writer at %d tx/s", copied, copyRate, resetWriterRate)

	w := startBenchWriter(ctx, pool, 300_000)
	pts := &pointTimes{at: map[reset.Point]time.Time{}}
	cfg := reset.Config{DatabaseURL: url, Activate: true, Reason: "synchrobench", Log: coordinatorLog(), AfterPoint: pts.record}
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
	if err := pts.check("the reset", len(resetRelations)); err != nil {
		return nil, err
	}
	at := pts.at
	stagingDur, copyDur, sqlDur := pts.staging()
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

// bareCopy reads the rows of rels with COPY (SELECT ...) TO STDOUT in one
// repeatable-read transaction and returns how many it read and at what rate
// (rows a second).
func bareCopy(ctx context.Context, url string, rels []resetRelation) (int64, float64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	t0 := time.Now()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var n int64
	for _, rel := range rels {
		tag, err := tx.Conn().PgConn().CopyTo(ctx, io.Discard, fmt.Sprintf("COPY (SELECT %s FROM %s) TO STDOUT", rel.columns, rel.name))
		if err != nil {
			return 0, 0, err
		}
		n += tag.RowsAffected()
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, err
	}
	return n, float64(n) / time.Since(t0).Seconds(), nil
}

// loadRelations loads the rows of rels in transactions of up to 100,000 rows:
// the first chunk (the first relation's, a dependency parent other relations
// reference) first, then the rest on two connections (a registered relation's
// fence trigger's cost per row is the load's). It returns how many it loaded.
func loadRelations(ctx context.Context, pool *pgxpool.Pool, rels []resetRelation) (int, error) {
	type chunk struct {
		rel      resetRelation
		from, to int
	}
	var chunks []chunk
	total := 0
	for _, rel := range rels {
		for from := 1; from <= rel.rows; from += 100_000 {
			chunks = append(chunks, chunk{rel, from, min(from+100_000-1, rel.rows)})
		}
		total += rel.rows
	}
	t0 := time.Now()
	load := func(c chunk) error {
		if _, err := pool.Exec(ctx, c.rel.insert, c.from, c.to); err != nil {
			return fmt.Errorf("load %s: %w", c.rel.name, err)
		}
		return nil
	}
	if err := load(chunks[0]); err != nil {
		return 0, err
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
	var err error
	for range 2 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return 0, err
	}
	progress("loaded %d rows in %s", total, time.Since(t0).Round(time.Millisecond))
	return total, nil
}

// coordinatorLog is the reset coordinator's log: discarded, unless
// SYNCHRO_LOG_LEVEL=debug (then stderr, at info).
func coordinatorLog() *slog.Logger {
	var out io.Writer = io.Discard
	if os.Getenv("SYNCHRO_LOG_LEVEL") == "debug" {
		out = os.Stderr
	}
	return logging.NewAt(out, slog.LevelInfo)
}

// pointTimes records when a coordinator first passed each of its points
// (reset.Config.AfterPoint: record) and when it finished copying each
// relation (reset.PointStaging, once a relation).
type pointTimes struct {
	mu            sync.Mutex
	at            map[reset.Point]time.Time
	relationsDone []time.Time
}

func (p *pointTimes) record(pt reset.Point) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if pt == reset.PointStaging {
		p.relationsDone = append(p.relationsDone, now)
	}
	if _, ok := p.at[pt]; !ok {
		p.at[pt] = now
	}
	return nil
}

// check fails unless the coordinator (what) passed every point from its slot
// to ready, staging relations relations.
func (p *pointTimes) check(what string, relations int) error {
	for _, pt := range []reset.Point{reset.PointSlotCreated, reset.PointBaselined, reset.PointCaughtUp, reset.PointReady} {
		if p.at[pt].IsZero() {
			return fmt.Errorf("%s never passed %s", what, pt)
		}
	}
	if len(p.relationsDone) != relations {
		return fmt.Errorf("%s staged %d relations, want %d", what, len(p.relationsDone), relations)
	}
	return nil
}

// staging splits the staging (slot created to baseline committed) into the Go
// copy of every relation's projections and the SQL that follows it (versions,
// memberships, synchro.stage_baseline and the commit).
func (p *pointTimes) staging() (all, copied, sql time.Duration) {
	last := p.relationsDone[len(p.relationsDone)-1]
	return p.at[reset.PointBaselined].Sub(p.at[reset.PointSlotCreated]), last.Sub(p.at[reset.PointSlotCreated]),
		p.at[reset.PointBaselined].Sub(last)
}

// resetWriterRate is the pace of the writer that commits during the reset (or
// the bootstrap).
const resetWriterRate = 200

// benchWriter commits one-row transactions at resetWriterRate, alternating an
// INSERT into bench.items and an UPDATE of one of the first notes rows of
// bench.notes, until stopped.
type benchWriter struct {
	cancel  context.CancelFunc
	done    chan struct{}
	written int
	err     error
}

func startBenchWriter(ctx context.Context, pool *pgxpool.Pool, notes int) *benchWriter {
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
				_, err = pool.Exec(ctx, `UPDATE bench.notes SET title = 'updated during the reset', n = n + 1 WHERE id = $1`, 1+(i*7919)%notes)
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
