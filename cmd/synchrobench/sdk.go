package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/client"
	"github.com/synchro-sync/synchro/internal/auth"
)

// sdkBench: the Go SDK's first sync of a 20,000-row scope (a fresh replica:
// connect, rebuild, pull, in 1,000-row pages) against synchrod; baseline: the
// server's rebuild of the same scope read by a bare HTTP client, so the ratio
// is the share of the first sync's time the SDK itself leaves to the server.
func sdkBench(ctx context.Context, srv *syncServer, pool *pgxpool.Pool) ([]row, error) {
	const user, n = "sdk", 20_000
	progress("sync: writing a %d-row scope for the SDK", n)
	if _, err := pool.Exec(ctx, `INSERT INTO bench.items SELECT 500000000 + g, $1, repeat('x', 100) FROM generate_series(1, $2::int) g`, user, n); err != nil {
		return nil, err
	}
	if err := waitMaterialized(ctx, pool); err != nil {
		return nil, err
	}
	var ignored map[string]any
	if err := srv.call(ctx, user, "/sync/connect", map[string]any{"client_id": "sdk-baseline", "protocol_version": 3}, &ignored); err != nil {
		return nil, err
	}
	progress("sync: rebuilding it over bare HTTP")
	t0 := time.Now()
	got, _, err := srv.rebuild(ctx, user, "sdk-baseline", "user:"+user, 1000)
	if err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("rebuild returned %d rows, want %d", got, n)
	}
	base := float64(got) / time.Since(t0).Seconds()

	dir, err := os.MkdirTemp("", "synchrobench-sdk-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c, err := client.Open(ctx, filepath.Join(dir, "replica.sqlite"), client.Config{
		ServerURL: srv.base, ClientID: "sdk-client", PageSize: 1000,
		Token: func(context.Context) (string, error) {
			return auth.MintHS256([]byte(benchSecret), "sub", user, time.Hour, time.Now())
		},
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	progress("sync: the SDK's first sync of it")
	t0 = time.Now()
	if err := c.Sync(ctx); err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	var held int
	if err := c.DB().QueryRowContext(ctx, `SELECT count(*) FROM items`).Scan(&held); err != nil {
		return nil, err
	}
	if held != n {
		return nil, fmt.Errorf("the replica holds %d rows after its first sync, want %d", held, n)
	}
	return []row{{Name: fmt.Sprintf("SDK first sync of a %d-row scope (1,000-row pages)", n), Value: float64(n) / elapsed.Seconds(),
		Unit: "rows/s", Baseline: "server rebuild, bare HTTP", BaseVal: base, Target: ">= 20000"}}, nil
}
