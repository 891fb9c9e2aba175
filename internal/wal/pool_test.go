package wal

import (
	"context"
	"testing"
)

// NewPool sizes the worker's pool at PoolConns unless the URL sets
// pool_max_conns, also to pgxpool's own default; it connects only when used.
func TestNewPoolSize(t *testing.T) {
	for url, want := range map[string]int32{
		"postgres://u@127.0.0.1:1/db":                   PoolConns,
		"postgres://u@127.0.0.1:1/db?pool_max_conns=5":  5,
		"postgres://u@127.0.0.1:1/db?pool_max_conns=4":  4,
		"host=127.0.0.1 port=1 user=u pool_max_conns=3": 3,
	} {
		p, err := NewPool(context.Background(), url)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if got := p.Config().MaxConns; got != want {
			t.Errorf("%s: %d connections, want %d", url, got, want)
		}
		p.Close()
	}
}
