package wal

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// pruneChunk is the most source transactions (or clients and push outcomes) one
// pruning call covers, so that each call is a short transaction however much
// history waits.
const pruneChunk = 5000

// pruneHistory prunes, every PruneInterval, the capture history (event ledger
// and write fences) of acknowledged transactions older than HistoryRetention
// and the pull history older than PullHistoryRetention (each unless zero), and
// the clients and push outcomes older than the client retention
// (synchro.prune_clients), chunk by chunk until none is left, logging progress
// while a round lasts. A chunk takes as long as it takes: timeouts set for
// application sessions do not bind it (untimed).
func (w *Worker) pruneHistory(ctx context.Context) {
	t := time.NewTicker(w.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.cfg.HistoryRetention > 0 {
			w.pruneRound(ctx)
		}
		if w.cfg.PullHistoryRetention > 0 {
			w.pruneHorizon(ctx)
		}
		w.pruneClients(ctx)
	}
}

func (w *Worker) pruneRound(ctx context.Context) {
	var txns, events int64
	started, logged := time.Now(), time.Now()
	for ctx.Err() == nil {
		var n, e int64
		err := w.untimed(ctx, func(r pgx.Row) error { return r.Scan(&n, &e) },
			`SELECT transactions, events FROM synchro.prune_capture_history($1::bigint * interval '1 microsecond', $2)`,
			w.cfg.HistoryRetention.Microseconds(), pruneChunk)
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Log.Warn("capture history pruning failed", "worker", w.cfg.WorkerID, "error", err.Error())
			}
			break
		}
		txns, events = txns+n, events+e
		w.cfg.Metrics.ObservePruned(e)
		if n == 0 {
			break
		}
		if time.Since(logged) >= w.cfg.ProgressInterval {
			w.cfg.Log.Info("pruning capture history", "worker", w.cfg.WorkerID, "transactions", txns, "events", events)
			logged = time.Now()
		}
	}
	if txns > 0 {
		w.cfg.Log.Info("capture history pruned", "worker", w.cfg.WorkerID, "transactions", txns, "events", events,
			"retention", w.cfg.HistoryRetention.String(), "took", time.Since(started).Round(time.Millisecond).String())
	}
}

// pruneHorizon advances the retention horizon of the pull history
// (synchro.prune_history) batch by batch, each removing the effects, superseded
// row versions, closed membership edges and superseded scope digests of at
// most pruneChunk events, until nothing older than PullHistoryRetention is left,
// logging progress with a rate while the round lasts.
func (w *Worker) pruneHorizon(ctx context.Context) {
	var total pruned
	started, logged := time.Now(), time.Now()
	for ctx.Err() == nil {
		var b pruned
		var txns int64
		err := w.untimed(ctx, func(r pgx.Row) error {
			return r.Scan(&b.horizon, &txns, &b.effects, &b.versions, &b.edges, &b.digests)
		}, `SELECT coalesce(horizon::text, ''), transactions, effects, versions, edges, digests FROM synchro.prune_history($1::bigint * interval '1 microsecond', $2, $3)`,
			w.cfg.PullHistoryRetention.Microseconds(), pruneChunk, started)
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Log.Warn("history pruning failed", "worker", w.cfg.WorkerID, "error", err.Error())
			}
			break
		}
		if txns == 0 {
			break
		}
		total.add(b)
		w.cfg.Metrics.ObserveHistoryPruned(b.effects + b.versions + b.edges + b.digests)
		if time.Since(logged) >= w.cfg.ProgressInterval {
			w.cfg.Log.Info("pruning history", append(total.attrs(w.cfg.WorkerID), "rows_per_second", total.rate(time.Since(started)))...)
			logged = time.Now()
		}
	}
	if total.horizon != "" {
		w.cfg.Log.Info("history pruned", append(total.attrs(w.cfg.WorkerID), "rows_per_second", total.rate(time.Since(started)),
			"retention", w.cfg.PullHistoryRetention.String(), "took", time.Since(started).Round(time.Millisecond).String())...)
	}
}

// pruned is what pruning the pull history removed, up to horizon.
type pruned struct {
	horizon                           string
	effects, versions, edges, digests int64
}

func (p *pruned) add(b pruned) {
	p.horizon = b.horizon
	p.effects, p.versions, p.edges, p.digests = p.effects+b.effects, p.versions+b.versions, p.edges+b.edges, p.digests+b.digests
}

func (p pruned) rate(d time.Duration) int64 {
	return int64(float64(p.effects+p.versions+p.edges+p.digests) / max(d.Seconds(), 1e-3))
}

func (p pruned) attrs(worker string) []any {
	return []any{"worker", worker, "horizon", p.horizon, "effects", p.effects, "versions", p.versions, "edges", p.edges, "digests", p.digests}
}

// pruneClients retires the clients not seen for the client retention and
// removes the push outcomes older than it (synchro.prune_clients), chunk by
// chunk.
func (w *Worker) pruneClients(ctx context.Context) {
	var clients, mutations int64
	for ctx.Err() == nil {
		var c, m int64
		err := w.untimed(ctx, func(r pgx.Row) error { return r.Scan(&c, &m) },
			`SELECT clients, mutations FROM synchro.prune_clients($1)`, pruneChunk)
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Log.Warn("client pruning failed", "worker", w.cfg.WorkerID, "error", err.Error())
			}
			break
		}
		clients, mutations = clients+c, mutations+m
		if c == 0 && m == 0 {
			break
		}
	}
	if clients > 0 || mutations > 0 {
		w.cfg.Log.Info("clients pruned", "worker", w.cfg.WorkerID, "clients", clients, "mutations", mutations)
	}
}
