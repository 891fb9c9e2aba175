package httpapi

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ServicePool opens the pool of the HTTP layer: every connection acts as the
// least-privileged synchro_service role, which may only call the sync entry
// points and read readiness. The database user must be a member of it.
func ServicePool(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SET ROLE synchro_service"); err != nil {
			return fmt.Errorf("SET ROLE synchro_service (grant the role to the database user: GRANT synchro_service TO <user>): %w", err)
		}
		return nil
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
