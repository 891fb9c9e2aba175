package httpapi

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpsPoolSize is the size of the pool of the operator endpoints (OpsPool).
const OpsPoolSize = 2

// ServicePool opens the pool of the HTTP layer's sync requests: every
// connection acts as the least-privileged synchro_service role, which may only
// call the sync entry points and read readiness. The database user must be a
// member of it. maxConns is the pool's size (0: pgx's default, max(4, CPUs));
// one user may hold at most maxConns-1 of them (Sync.MaxUserRequests).
func ServicePool(ctx context.Context, databaseURL string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SET ROLE synchro_service"); err != nil {
			return fmt.Errorf("SET ROLE synchro_service (grant the role to the database user: GRANT synchro_service TO <user>): %w", err)
		}
		return nil
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// OpsPool opens the pool of the operator endpoints (/readyz): OpsPoolSize
// connections as synchro_service, apart from the sync requests' pool, so that
// readiness never waits behind user traffic (a load balancer would take a
// healthy but busy instance out).
func OpsPool(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	return ServicePool(ctx, databaseURL, OpsPoolSize)
}
