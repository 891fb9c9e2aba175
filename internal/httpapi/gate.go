package httpapi

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/db"
)

// readinessGate answers whether capture is ready (synchro.is_ready, docs/change-stream.md
// "Readiness") for pull and rebuild, asking the database at most once per
// interval and sharing the answer between requests. It is fail-closed: an error
// or a timeout is "not ready".
type readinessGate struct {
	pool     *pgxpool.Pool
	interval time.Duration

	mu        sync.Mutex
	checkedAt time.Time
	ready     bool
}

func (g *readinessGate) isReady(ctx context.Context) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checkedAt) < g.interval {
		return g.ready
	}
	ctx, cancel := context.WithTimeout(ctx, readinessTimeout)
	defer cancel()
	ready, err := db.New(g.pool).IsReady(ctx)
	if err != nil {
		ready = false
	}
	g.ready, g.checkedAt = ready, time.Now()
	return ready
}
