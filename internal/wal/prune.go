package wal

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// pruneChunk is the most source transactions one pruning call covers, so that
// each call is a short transaction however much history waits.
const pruneChunk = 5000

// pruneHistory prunes the capture history (event ledger and write fences) of
// acknowledged transactions older than HistoryRetention every PruneInterval,
// chunk by chunk until none is left, logging progress while a round lasts. A
// chunk takes as long as it takes: timeouts set for application sessions do not
// bind it (untimed).
func (w *Worker) pruneHistory(ctx context.Context) {
	t := time.NewTicker(w.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.pruneRound(ctx)
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
