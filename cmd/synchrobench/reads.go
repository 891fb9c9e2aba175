package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// readsRun measures the capture of writes to relations that rules read: a
// backlog of one-row transactions into a path rule's parent (each moves its
// 10 children between users' scopes) and one into a members relation (each
// shares a note with one more user), each materialized by the worker, beside
// a backlog of one-row transactions into a table no rule reads, in the same
// database and run.
func readsRun(ctx context.Context, adminURL, pgbin string, seconds int) ([]row, error) {
	url, pool, drop, err := benchDB(ctx, adminURL, "bench_reads")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE bench.parents (id text PRIMARY KEY, user_id text NOT NULL);
		CREATE TABLE bench.children (id bigint PRIMARY KEY, parent_id text NOT NULL REFERENCES bench.parents, body text);
		CREATE INDEX ON bench.children (parent_id);
		CREATE TABLE bench.notes (id text PRIMARY KEY, title text);
		CREATE TABLE bench.note_members (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		    note_id text NOT NULL REFERENCES bench.notes, user_id text NOT NULL);
		CREATE INDEX ON bench.note_members (note_id);
		SELECT synchro.register_table('bench.children', '{"kind":"path","path":["parent_id"],"template":"user:{user_id}"}');
		SELECT synchro.register_table('bench.notes', '{"kind":"members","relation":"bench.note_members","template":"user:{user_id}"}')`); err != nil {
		return nil, err
	}
	stop := startWorker(url, pool)
	if err := waitFor(ctx, pool, `SELECT EXISTS (SELECT FROM synchro.progress)`); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO bench.parents SELECT 'p' || g, 'u' || (g % 100) FROM generate_series(1, 1000) g;
		INSERT INTO bench.children SELECT g, 'p' || (1 + g % 1000), 'child' FROM generate_series(1, 10000) g;
		INSERT INTO bench.notes SELECT 'n' || g, 'note' FROM generate_series(1, 1000) g;
		INSERT INTO bench.note_members (note_id, user_id) SELECT 'n' || (1 + g % 1000), 'u' || (g % 100) FROM generate_series(1, 2000) g`); err != nil {
		return nil, err
	}
	if err := waitMaterialized(ctx, pool); err != nil {
		return nil, err
	}
	stop()

	backlog := func(what, script string) (float64, error) {
		progress("reads: pgbench writing 1-row transactions into %s for %ds (worker stopped)", what, seconds)
		if _, _, err := pgbench(ctx, pgbin, url, script, seconds); err != nil {
			return 0, err
		}
		return materializeBacklog(ctx, url, pool, what)
	}
	plain, err := backlog("a table no rule reads", "\\set u random(1, 100)\nINSERT INTO bench.items VALUES (nextval('bench.seq'), 'u' || :u, 'payload');\n")
	if err != nil {
		return nil, err
	}
	parent, err := backlog("a path rule's parent", "\\set u random(1, 100)\n\\set p random(1, 1000)\nUPDATE bench.parents SET user_id = 'u' || :u WHERE id = 'p' || :p;\n")
	if err != nil {
		return nil, err
	}
	members, err := backlog("a members relation", "\\set u random(1, 100)\n\\set n random(1, 1000)\nINSERT INTO bench.note_members (note_id, user_id) VALUES ('n' || :n, 'u' || :u);\n")
	if err != nil {
		return nil, err
	}
	return []row{
		{Name: "capture throughput, 1-row tx into a path rule's parent", Value: parent, Unit: "tx/s",
			Baseline: "1-row tx into a table no rule reads", BaseVal: plain, Target: ">= 0.5x"},
		{Name: "capture throughput, 1-row tx into a members relation", Value: members, Unit: "tx/s",
			Baseline: "1-row tx into a table no rule reads", BaseVal: plain, Target: ">= 0.5x"},
	}, nil
}

// materializeBacklog starts the worker on the backlog of fenced transactions
// written while it was stopped, waits until it materialized every one and
// returns the transactions it materialized a second.
func materializeBacklog(ctx context.Context, url string, pool *pgxpool.Pool, what string) (float64, error) {
	var txns int64
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT f.xid) FROM synchro.fence f
		WHERE NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`).Scan(&txns); err != nil {
		return 0, err
	}
	// A transaction of its own ends the backlog; the wait reads the progress
	// row, not the ledgers: it must not load the database it measures.
	var end string
	if err := pool.QueryRow(ctx, `SELECT pg_logical_emit_message(true, 'synchrobench', 'end')::text`).Scan(&end); err != nil {
		return 0, err
	}
	t0 := time.Now()
	stop := startWorker(url, pool)
	err := waitFor(ctx, pool, `SELECT coalesce(materialized_end_lsn >= $1::pg_lsn, false) FROM synchro.progress`, end)
	dur := time.Since(t0)
	stop()
	if err != nil {
		return 0, err
	}
	rate := float64(txns) / dur.Seconds()
	progress("reads: %d transactions into %s materialized in %s (%.0f tx/s)", txns, what, dur.Round(time.Millisecond), rate)
	if txns == 0 {
		return 0, fmt.Errorf("no backlog of %s", what)
	}
	return rate, nil
}
