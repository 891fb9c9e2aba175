package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// attackBench: another user's pull page p99 while one user runs the attack of
// issue 28, point 3 (32 concurrent pushes that update the same rows in
// opposite orders, so they wait for each other's row locks and deadlock),
// beside the same figure unloaded. The attacker's requests over its per-user
// bound are refused (it asks again after 100 ms, so that its bound stays
// full), its pushes are bounded by the push timeout, and the reader's pulls
// keep their connections: target within 2x.
func attackBench(ctx context.Context, srv *syncServer, pool *pgxpool.Pool, seconds int) ([]row, error) {
	const attackers, page = 32, 100
	const user, attacker = "bystander", "attacker"
	measure, err := srv.connectClient(ctx, user, "bystander-client")
	if err != nil {
		return nil, err
	}
	if _, err := srv.connectClient(ctx, attacker, "attacker-client"); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench.items SELECT 600000000 + g, $1, 'row' FROM generate_series(1, $2) g
		UNION ALL SELECT 610000000 + g, $3, 'row' FROM generate_series(1, 8) g`, user, page, attacker); err != nil {
		return nil, err
	}
	if err := waitMaterialized(ctx, pool); err != nil {
		return nil, err
	}
	pulls := func() ([]time.Duration, error) {
		var samples []time.Duration
		for end := time.Now().Add(time.Duration(seconds) * time.Second); time.Now().Before(end); {
			t0 := time.Now()
			a, err := srv.pull(ctx, user, "bystander-client", "user:"+user, measure, page)
			if err != nil {
				return nil, err
			}
			if len(a.Changes) != page {
				return nil, fmt.Errorf("page of %d changes, want %d", len(a.Changes), page)
			}
			samples = append(samples, time.Since(t0))
		}
		return samples, nil
	}
	progress("sync: pull pages of %d changes for %ds, unloaded", page, seconds)
	unloaded, err := pulls()
	if err != nil {
		return nil, err
	}
	progress("sync: pull pages of %d changes for %ds while %d pushes of one user deadlock", page, seconds, attackers)
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for a := range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; actx.Err() == nil; n++ {
				var muts []map[string]any
				for i := range 8 {
					id := 610000001 + i
					if a%2 == 1 {
						id = 610000008 - i // the opposite order
					}
					muts = append(muts, map[string]any{"mutation_id": fmt.Sprintf("a%d-%d-%d", a, n, i), "table": "items",
						"op": "update", "pk": map[string]any{"id": id}, "columns": map[string]any{"body": fmt.Sprintf("%d-%d", a, n)}})
				}
				var ignored map[string]any
				if retry, _ := srv.callOnce(actx, attacker, "/sync/push", map[string]any{"client_id": "attacker-client", "mutations": muts}, &ignored); retry {
					select { // refused over its bound: ask again soon, keeping the bound full
					case <-actx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		}()
	}
	loaded, err := pulls()
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	_, u99 := percentiles(unloaded)
	_, l99 := percentiles(loaded)
	return []row{{Name: fmt.Sprintf("pull page p99 (%d changes) while one user runs %d deadlocking pushes", page, attackers),
		Value: l99, Unit: "ms", Baseline: "the same pulls unloaded", BaseVal: u99, Target: "< 2x"}}, nil
}
