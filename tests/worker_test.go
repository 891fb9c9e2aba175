package tests

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

func TestWorkerMaterializesEffects(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id text PRIMARY KEY, title text, owner_id text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}')`)
	startWorker(t, d, workerConfig(d, "w1"))
	waitFor(t, "stream start", 30e9, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM synchro.progress)`).Scan(&ok)
		return ok, err
	})
	d.Exec(t, `INSERT INTO app.docs VALUES ('d1', 'one', 'u1'), ('d2', 'two', 'u2')`)
	d.Exec(t, `UPDATE app.docs SET owner_id = 'u2' WHERE id = 'd1'`)
	waitMaterialized(t, d)
	rows, err := d.Pool.Query(context.Background(), `SELECT scope, event_ordinal, effect_ordinal, key, op FROM synchro.effect ORDER BY commit_lsn, scope, event_ordinal, effect_ordinal`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var scope, key, op string
		var eo, fo int
		if err := rows.Scan(&scope, &eo, &fo, &key, &op); err != nil {
			t.Fatal(err)
		}
		got = append(got, scope+"/"+key+"/"+op)
	}
	t.Logf("effects: %v", got)
	want := []string{"user:u1/d1/upsert", "user:u2/d2/upsert", "user:u1/d1/delete", "user:u2/d1/upsert"}
	if len(got) != len(want) {
		t.Fatalf("effects %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("effects %v, want %v", got, want)
		}
	}
}

// TestWorkerRefusesSmallPool: a session holds one pool connection for the
// worker role lock and one for materialization, so a pool of two could never
// acknowledge; the worker says so instead of hanging.
func TestWorkerRefusesSmallPool(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	pool, err := pgxpool.New(context.Background(), d.URL+"&pool_max_conns=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	err = wal.New(workerConfig(d, "w1"), pool).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "needs at least 3") {
		t.Fatalf("worker on a 2-connection pool returned %v", err)
	}
}

// TestWorkerStreamsWithPoolSettingsInURL: pgx's settings in the database URL
// (pool_max_conns, which sizes synchrod's pools) are not server settings: the
// worker's replication connection sent it to the server, which refused the
// connection, and the worker never streamed.
func TestWorkerStreamsWithPoolSettingsInURL(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	cfg.DatabaseURL += "&pool_max_conns=5"
	log := logTo(&cfg)
	startWorker(t, d, cfg)
	waitFor(t, "worker w1 streaming", 30*time.Second, func() (bool, error) {
		if m := regexp.MustCompile(`worker session failed.*`).FindString(log.String()); m != "" {
			return false, errors.New(m)
		}
		return strings.Contains(log.String(), "state=streaming"), nil
	})
	c := commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'x')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, c)
}

// TestBacklogIsPipelined: transactions written while the worker was stopped are
// a backlog even when no batch fills up. The WAL sender sends no keepalive while
// it has WAL to send, so the worker materializes such batches while it receives
// the next ones, and every transaction written is materialized. While behind, the
// worker logs its progress (transactions, rate, position, bytes behind) every
// ProgressInterval, and once caught up, how long it took.
func TestBacklogIsPipelined(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ownedDocs(t, d)
	createWriteMany(t, d, "'u' || i % 10")
	w := startStreaming(t, d, workerConfig(d, "w1"))
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	d.Exec(t, `CALL app.write_many(10000)`)

	cfg := workerConfig(d, "w1")
	// No batch can fill up: only the missing keepalives tell the backlog.
	cfg.BatchMaxTxns, cfg.BatchMaxEvents, cfg.BatchMaxDelay = 1000000, 1000000, 20*time.Millisecond
	cfg.ProgressInterval = time.Nanosecond // a progress line after every batch behind
	log := logTo(&cfg)
	startWorker(t, d, cfg)
	waitMaterialized(t, d)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger`); n < 10000 {
		t.Fatalf("%d transactions in the ledger, want the 10000 written", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.effect`); n != 10000 {
		t.Fatalf("%d effects, want one per row written", n)
	}
	if !strings.Contains(log.String(), "pipelined=true") {
		t.Fatalf("no batch of the backlog was pipelined; worker log:\n%s", log.String())
	}
	// A live transaction after the backlog: its batch, if not the backlog's last
	// one already, ends the catch-up.
	commitTxn(t, d, `INSERT INTO app.docs VALUES (10001, 'u1')`)
	waitMaterialized(t, d)
	waitFor(t, "the caught-up log line", 10*time.Second, func() (bool, error) {
		return strings.Contains(log.String(), `msg="capture caught up"`), nil
	})
	progress := regexp.MustCompile(`level=INFO msg="capture catching up" worker=w1 transactions=[1-9][0-9]* per_second=[0-9]+ position=[0-9A-F]+/[0-9A-F]+ behind_bytes=[0-9]+\n`)
	if !progress.MatchString(log.String()) {
		t.Fatalf("no progress line while catching up; worker log:\n%s", log.String())
	}
	if !regexp.MustCompile(`level=INFO msg="capture caught up" worker=w1 transactions=[1-9][0-9]* duration=[0-9.]+m?s\n`).MatchString(log.String()) {
		t.Fatalf("no caught-up line with the transactions and duration; worker log:\n%s", log.String())
	}
}

// TestStreamStaysAliveWhilePreparing: while the stream prepares a batch, or
// waits for the batch before it, it does not read from the replication
// connection, and preparing a transaction of a million row events takes tens
// of seconds; the server ends a session that sent nothing for
// wal_sender_timeout, and the next one received the whole transaction again.
// The worker keeps sending standby status updates meanwhile: a hook holds the
// first preparation until the server has had an update from the worker more
// than two seconds after the hold began; the batch is then materialized once.
func TestStreamStaysAliveWhilePreparing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	cfg := workerConfig(d, "w1")
	var held atomic.Bool
	observed := make(chan error, 1)
	cfg.AfterStep = func(s wal.Step) error {
		if s == wal.StepPreparing && held.CompareAndSwap(false, true) {
			observed <- awaitStatusUpdate(d, cfg.Slot, 2*time.Second)
		}
		return nil
	}
	startStreaming(t, d, cfg)
	c := commitTxn(t, d, `INSERT INTO app.t VALUES ('k', 'v', 'u1')`)
	select {
	case err := <-observed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the worker never prepared a batch")
	}
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, c)
}

// awaitStatusUpdate waits (up to 30 s) until the WAL sender of slot has had a
// status update from its client more than after past the call.
func awaitStatusUpdate(d *testdb.DB, slot string, after time.Duration) error {
	ctx := context.Background()
	var since time.Time
	if err := d.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&since); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var ok bool
		err := d.Pool.QueryRow(ctx, `SELECT coalesce((SELECT r.reply_time > $2 FROM pg_stat_replication r
			JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1), false)`,
			slot, since.Add(after)).Scan(&ok)
		if err != nil || ok {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("no status update from the worker while it held the preparation")
}

// createWriteMany creates the procedure app.write_many(n): n transactions, the
// i-th inserting the row (i, value) into app.docs (value an expression of i).
func createWriteMany(t *testing.T, d *testdb.DB, value string) {
	t.Helper()
	d.Exec(t, `CREATE PROCEDURE app.write_many(n int) LANGUAGE plpgsql AS $$
		BEGIN
			FOR i IN 1..n LOOP
				INSERT INTO app.docs VALUES (i, `+value+`);
				COMMIT;
			END LOOP;
		END $$`)
}

// TestAdaptiveBatchingIdleCommit: on an idle stream a commit is materialized
// as soon as the stream goes quiet, not after the batch delay (here far longer
// than the wait allows).
func TestAdaptiveBatchingIdleCommit(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ownedDocs(t, d)
	cfg := workerConfig(d, "w1")
	cfg.BatchMaxDelay = time.Hour
	startStreaming(t, d, cfg)
	for i := range 3 {
		d.Exec(t, `INSERT INTO app.docs VALUES ($1, 'u1')`, i)
		waitFor(t, "the commit materialized", 30*time.Second, func() (bool, error) {
			return queryInt(t, d, `SELECT count(*) FROM synchro.effect`) == int64(i+1), nil
		})
	}
}
