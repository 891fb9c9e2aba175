package main

import (
	"context"
	"fmt"
	"github.com/synchro-sync/synchro/internal/wal"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/capture"
)

var (
	tpsRE     = regexp.MustCompile(`tps = ([0-9.]+)`)
	latencyRE = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

// pgbench runs a 2-client pgbench script and returns its transactions per
// second and average transaction latency (ms).
func pgbench(ctx context.Context, pgbin, url, script string, seconds int, extra ...string) (tps, latencyMS float64, err error) {
	f, err := os.CreateTemp("", "synchrobench-*.sql")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		return 0, 0, err
	}
	f.Close()
	args := append([]string{"-n", "-c", "2", "-j", "2", "-T", strconv.Itoa(seconds), "-f", f.Name()}, extra...)
	args = append(args, url)
	out, err := exec.CommandContext(ctx, filepath.Join(pgbin, "pgbench"), args...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("pgbench: %v: %s", err, out)
	}
	m := tpsRE.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("pgbench printed no tps: %s", out)
	}
	if tps, err = strconv.ParseFloat(string(m[1]), 64); err != nil {
		return 0, 0, err
	}
	if l := latencyRE.FindSubmatch(out); l != nil {
		latencyMS, err = strconv.ParseFloat(string(l[1]), 64)
	}
	return tps, latencyMS, err
}

// insertScript is a pgbench transaction of width single-row INSERTs into table.
func insertScript(width int, table string) string {
	var b strings.Builder
	b.WriteString("BEGIN;\n")
	for i := 0; i < width; i++ {
		b.WriteString("INSERT INTO " + table + " VALUES (nextval('bench.seq'), 'u' || (random() * 100)::int, 'payload');\n")
	}
	b.WriteString("COMMIT;\n")
	return b.String()
}

// captureRun writes a backlog with pgbench while the worker is stopped, then
// measures how fast the worker materializes it and how fast a bare reader decodes it.
// The worker runs with the batch quiet gap quietGap (negative: none, every
// batch waits the batch delay). It returns the rows and the capture rate in
// transactions a second.
func captureRun(ctx context.Context, adminURL, pgbin string, width, seconds int, quietGap time.Duration) ([]row, float64, error) {
	name := fmt.Sprintf("bench_capture_%d", width)
	rawSlot := "raw_" + name
	url, pool, drop, err := benchDB(ctx, adminURL, name)
	if err != nil {
		return nil, 0, err
	}
	defer drop()
	// Baseline first, while no decoder reads the WAL. Its slot, of a
	// publication of the plain table alone, gives the rate at which PostgreSQL
	// decodes unfenced INSERTs: what the fences' WAL costs the WAL sender.
	plainSlot := "raw_plain_" + name
	if _, err := pool.Exec(ctx, `CREATE PUBLICATION bench_plain FOR TABLE bench.plain_items`); err != nil {
		return nil, 0, err
	}
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, plainSlot); err != nil {
		return nil, 0, err
	}
	progress("%d-row: pgbench writing an unregistered table for %ds (baseline)", width, seconds)
	plainTPS, _, err := pgbench(ctx, pgbin, url, insertScript(width, "bench.plain_items"), seconds)
	if err != nil {
		return nil, 0, err
	}
	var plainEnd string
	if err := pool.QueryRow(ctx, `SELECT pg_logical_emit_message(true, 'synchrobench', 'end')::text`).Scan(&plainEnd); err != nil {
		return nil, 0, err
	}
	plainRawTxns, _, plainRawDur, err := rawDecode(ctx, url, plainSlot, "bench_plain", plainEnd)
	if err != nil {
		return nil, 0, err
	}
	if err := dropSlot(ctx, pool, plainSlot); err != nil {
		return nil, 0, err
	}
	// Start the stream (creates the slot), then stop the worker so WAL accumulates.
	cfg := workerConfig(url)
	cfg.BatchQuietGap = quietGap
	stop := startWorkerConfig(cfg, pool)
	if err := waitFor(ctx, pool, `SELECT EXISTS (SELECT FROM synchro.progress)`); err != nil {
		return nil, 0, err
	}
	stop()
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, rawSlot); err != nil {
		return nil, 0, err
	}
	progress("%d-row: pgbench writing for %ds", width, seconds)
	tps, _, err := pgbench(ctx, pgbin, url, insertScript(width, "bench.items"), seconds)
	if err != nil {
		return nil, 0, err
	}

	var txns int64
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT xid) FROM synchro.fence`).Scan(&txns); err != nil {
		return nil, 0, err
	}
	// A transaction of its own ends the backlog, so that the raw read ends on a
	// transaction whatever the server writes to the WAL after the load (a
	// checkpoint, autovacuum): no transaction would end at the flush position.
	var target string
	if err := pool.QueryRow(ctx, `SELECT pg_logical_emit_message(true, 'synchrobench', 'end')::text`).Scan(&target); err != nil {
		return nil, 0, err
	}

	progress("%d-row: %d transactions written; raw decode", width, txns)
	rawCPU := cpuWindow(ctx, pool, name)
	rawTxns, lastEnd, rawDur, err := rawDecode(ctx, url, rawSlot, "synchro", target)
	rawUse := rawCPU()
	if err != nil {
		return nil, 0, err
	}

	progress("%d-row: raw decode %d tx in %s; materializing", width, rawTxns, rawDur.Round(time.Millisecond))
	cpu := cpuWindow(ctx, pool, name)
	t0 := time.Now()
	stop = startWorkerConfig(cfg, pool)
	// The progress row, not a count over the ledger: the wait must not load the
	// database it measures.
	err = waitFor(ctx, pool, `SELECT coalesce(materialized_end_lsn >= $1::pg_lsn, false) FROM synchro.progress`, lastEnd.String())
	dur := time.Since(t0)
	stop()
	use := cpu()
	progress("%d-row: materialized in %s", width, dur.Round(time.Millisecond))
	if err != nil {
		return nil, 0, err
	}
	if err := dropSlot(ctx, pool, rawSlot); err != nil {
		return nil, 0, err
	}
	capTPS := float64(txns) / dur.Seconds()
	rawTPS := float64(rawTxns) / rawDur.Seconds()
	targetTx, targetRows, targetRate := "", "", 10000.0
	if width == 1 {
		targetTx = ">= 10000"
	} else {
		targetRows, targetRate = ">= 25000", 25000
	}
	rows := []row{
		{Name: fmt.Sprintf("pgbench fenced writes, %d-row tx, 2 clients", width), Value: tps, Unit: "tx/s",
			Baseline: "plain INSERT, no fence", BaseVal: plainTPS},
		{Name: fmt.Sprintf("capture throughput, %d-row tx (%d tx backlog)", width, txns), Value: capTPS, Unit: "tx/s",
			Baseline: "raw pgoutput decode", BaseVal: rawTPS, Target: targetTx},
		{Name: fmt.Sprintf("capture throughput, %d-row tx", width), Value: capTPS * float64(width), Unit: "rows/s",
			Baseline: "pgbench write", BaseVal: tps * float64(width), Target: targetRows},
		{Name: fmt.Sprintf("raw pgoutput decode, %d-row tx of fenced rows", width), Value: rawTPS * float64(width), Unit: "rows/s",
			Baseline: "unfenced INSERTs", BaseVal: float64(plainRawTxns) * float64(width) / plainRawDur.Seconds()},
	}
	return append(rows, cpuRows(width, use, rawUse, txns*int64(width), targetRate)...), capTPS, nil
}

// captureRuns measures capture of 1-row and of 10-row transactions, then
// capture of 1-row transactions again with batching fixed (every batch waits
// the batch delay), the baseline of adaptive batching on a backlog.
func captureRuns(ctx context.Context, adminURL, pgbin string, seconds int) ([]row, error) {
	var rows []row
	var adaptive float64
	for _, width := range []int{1, 10} {
		r, rate, err := captureRun(ctx, adminURL, pgbin, width, seconds, wal.DefaultBatchQuietGap)
		if err != nil {
			return nil, fmt.Errorf("%d-row transactions: %w", width, err)
		}
		if width == 1 {
			adaptive = rate
		}
		rows = append(rows, r...)
	}
	progress("1-row again, batching fixed")
	_, fixed, err := captureRun(ctx, adminURL, pgbin, 1, seconds, -1)
	if err != nil {
		return nil, fmt.Errorf("1-row transactions, batching fixed: %w", err)
	}
	return append(rows, row{Name: "capture throughput, 1-row tx, adaptive batching", Value: adaptive, Unit: "tx/s",
		Baseline: "fixed 10 ms batch delay, own backlog", BaseVal: fixed}), nil
}

// cpuRows reports where the capture's CPU time went, per captured row, beside
// what the machine's cores allow per row at the target rate, and what the WAL
// sender spent on the same rows in the raw decode (raw), which reads the source
// WAL alone. The WAL sender is one process, and materialization runs serially
// in commit order (docs/change-stream.md) in one backend: at the CPU time per row of either,
// the rows per second of one core bound capture whatever the others cost (the
// materialization figure also holds the worker's other, small queries, so its
// bound is a little low).
func cpuRows(width int, use, raw cpuUse, rows int64, targetRate float64) []row {
	perRow := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(rows) }
	name := func(what string) string { return fmt.Sprintf("capture CPU per row, %d-row tx: %s", width, what) }
	out := []row{{Name: name("worker process (Go)"), Value: perRow(use.worker), Unit: "µs"}}
	if !use.measuredProc {
		return out // the cluster runs elsewhere: its processes are not in /proc
	}
	budget := float64(runtime.NumCPU()) * 1e6 / targetRate
	return append(out,
		row{Name: name("WAL sender"), Value: perRow(use.walSender), Unit: "µs",
			Baseline: "its raw decode of the source WAL alone", BaseVal: perRow(raw.walSender)},
		row{Name: fmt.Sprintf("capture ceiling, %d-row tx: one WAL sender on a whole core", width),
			Value: 1e6 / max(perRow(use.walSender), 1), Unit: "rows/s", Baseline: "target", BaseVal: targetRate},
		row{Name: name("materialization backends"), Value: perRow(use.backends), Unit: "µs"},
		row{Name: fmt.Sprintf("capture ceiling, %d-row tx: serial materialization on a whole core", width),
			Value: 1e6 / max(perRow(use.backends), 1), Unit: "rows/s", Baseline: "target", BaseVal: targetRate},
		row{Name: name("all three"), Value: perRow(use.worker + use.walSender + use.backends), Unit: "µs",
			Baseline: fmt.Sprintf("%d cores at the target rate", runtime.NumCPU()), BaseVal: budget})
}

// rawDecode streams a pgoutput slot to target with a bare pglogrepl reader that
// only parses messages, and returns the committed transactions seen and the end
// of the last one.
func rawDecode(ctx context.Context, url, slot, publication, target string) (int64, pglogrepl.LSN, time.Duration, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return 0, 0, 0, err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, 0, 0, err
	}
	defer conn.Close(ctx)
	end, err := pglogrepl.ParseLSN(target)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + publication + "'", "messages 'true'"},
	}); err != nil {
		return 0, 0, 0, err
	}
	asm := capture.NewAssembler()
	var txns int64
	var last pglogrepl.LSN
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			continue
		}
		if cd.Data[0] == pglogrepl.PrimaryKeepaliveMessageByteID {
			// A keepalive that asks a reply needs one within wal_sender_timeout,
			// or the server ends the stream.
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return 0, 0, 0, err
			}
			if ka.ReplyRequested {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last}); err != nil {
					return 0, 0, 0, err
				}
			}
			continue
		}
		if cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			return 0, 0, 0, err
		}
		txn, err := asm.Feed(xld.WALData)
		if err != nil {
			return 0, 0, 0, err
		}
		if txn != nil {
			txns++
			last = txn.EndLSN
			if txn.EndLSN >= end-1 || txn.CommitLSN >= end {
				return txns, last, time.Since(t0), nil
			}
		}
		if xld.WALStart >= end {
			return txns, last, time.Since(t0), nil
		}
	}
}

// latencyRun offers a fixed load of 1-row transactions with the worker running
// and measures commit-to-materialized latency: from each transaction's commit
// time to the first moment a poll of the progress row (every 10 ms, both
// timestamps from the server clock) shows it materialized, i.e. committed.
// The load runs latencyWarmup longer than seconds: the transactions committed in
// that first stretch meet a cold worker session (every statement of the
// materialization is planned on first use) and are reported apart as the
// cold start, so that p50 and p99 describe the sustained load. It measures
// adaptive batching (the default: a batch goes when the stream is quiet for
// 1 ms or after 10 ms) beside a fixed 10 ms batch delay (the rule before it),
// each in a database of its own under the same load.
func latencyRun(ctx context.Context, adminURL, pgbin string, seconds int) ([]row, error) {
	adaptive, err := latencyOf(ctx, adminURL, pgbin, seconds, wal.DefaultBatchQuietGap)
	if err != nil {
		return nil, err
	}
	fixed, err := latencyOf(ctx, adminURL, pgbin, seconds, -1)
	if err != nil {
		return nil, err
	}
	const base = "fixed 10 ms batch delay, same load"
	return []row{
		{Name: fmt.Sprintf("offered load (pgbench --rate %d)", latencyRate), Value: adaptive.tps, Unit: "tx/s", Baseline: "rate asked", BaseVal: latencyRate},
		{Name: "commit-to-materialized p50", Value: adaptive.p50, Unit: "ms", Baseline: base, BaseVal: fixed.p50},
		{Name: "commit-to-materialized p99", Value: adaptive.p99, Unit: "ms", Baseline: base, BaseVal: fixed.p99, Target: "< 100"},
		{Name: "writers' tx latency avg (pgbench)", Value: adaptive.txLatency, Unit: "ms", Baseline: base, BaseVal: fixed.txLatency},
		{Name: fmt.Sprintf("commit-to-materialized p99, first %s (cold worker)", latencyWarmup), Value: adaptive.coldP99, Unit: "ms",
			Baseline: base, BaseVal: fixed.coldP99},
	}, nil
}

// latencyRate is the load latencyRun offers, in transactions a second.
const latencyRate = 2000

// latencies is one latencyOf run.
type latencies struct {
	tps, txLatency, p50, p99, coldP99 float64
}

// latencyOf is one latencyRun measure with the worker's batch quiet gap set
// to quietGap (negative: none, every batch waits the batch delay).
func latencyOf(ctx context.Context, adminURL, pgbin string, seconds int, quietGap time.Duration) (latencies, error) {
	var out latencies
	url, pool, drop, err := benchDB(ctx, adminURL, "bench_latency")
	if err != nil {
		return out, err
	}
	defer drop()
	cfg := workerConfig(url)
	cfg.BatchQuietGap = quietGap
	stop := startWorkerConfig(cfg, pool)
	defer stop()
	if err := waitFor(ctx, pool, `SELECT EXISTS (SELECT FROM synchro.progress)`); err != nil {
		return out, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan []progressSample, 1)
	go func() { watched <- watchProgress(wctx, pool, 10*time.Millisecond) }()
	offered := seconds + int(latencyWarmup.Seconds())
	progress("latency: offering %d tx/s for %ds (the first %s a warm-up), batch quiet gap %s (negative: none)", latencyRate, offered, latencyWarmup, quietGap)
	out.tps, out.txLatency, err = pgbench(ctx, pgbin, url, insertScript(1, "bench.items"), offered, "--rate", strconv.Itoa(latencyRate))
	if err != nil {
		stopWatch()
		return out, err
	}
	var target string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&target); err != nil {
		stopWatch()
		return out, err
	}
	err = waitFor(ctx, pool, `SELECT processed_end_lsn >= $1::pg_lsn FROM synchro.progress`, target)
	stopWatch()
	samples := <-watched
	if err != nil {
		return out, err
	}
	rows, err := pool.Query(ctx, `SELECT commit_lsn::text, commit_time,
			commit_time < min(commit_time) OVER () + $1::interval
		FROM synchro.txn_ledger WHERE applied_count > 0`, latencyWarmup.String())
	if err != nil {
		return out, err
	}
	var lat, cold []time.Duration
	for rows.Next() {
		var lsnText string
		var committed time.Time
		var warmup bool
		if err := rows.Scan(&lsnText, &committed, &warmup); err != nil {
			return out, err
		}
		lsn, err := pglogrepl.ParseLSN(lsnText)
		if err != nil {
			return out, err
		}
		i := sort.Search(len(samples), func(i int) bool { return samples[i].lsn >= lsn })
		if i == len(samples) {
			return out, fmt.Errorf("transaction %s was never seen materialized", lsnText)
		}
		if warmup {
			cold = append(cold, samples[i].at.Sub(committed))
		} else {
			lat = append(lat, samples[i].at.Sub(committed))
		}
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	out.p50, out.p99 = percentiles(lat)
	_, out.coldP99 = percentiles(cold)
	return out, nil
}

// latencyWarmup is the first stretch of the offered load, reported apart.
const latencyWarmup = 2 * time.Second

// progressSample is the materialized high-watermark seen at a server time.
type progressSample struct {
	at  time.Time
	lsn pglogrepl.LSN
}

// watchProgress polls the progress row every interval until ctx ends, then once
// more, and returns the samples (in time order, so also in LSN order).
func watchProgress(ctx context.Context, pool *pgxpool.Pool, interval time.Duration) []progressSample {
	var out []progressSample
	sample := func(ctx context.Context) {
		var at time.Time
		var lsn *string
		if err := pool.QueryRow(ctx, `SELECT clock_timestamp(), materialized_commit_lsn::text FROM synchro.progress`).Scan(&at, &lsn); err != nil || lsn == nil {
			return
		}
		if l, err := pglogrepl.ParseLSN(*lsn); err == nil {
			out = append(out, progressSample{at, l})
		}
	}
	for ctx.Err() == nil {
		sample(ctx)
		time.Sleep(interval)
	}
	sample(context.Background())
	return out
}
