package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/wal"
)

// exampleServer is what the examples sync with: the HTTP API and a capture
// worker over a database of the test cluster (SYNCHRO_TEST_DATABASE_URL, as
// `make test` and scripts/test.sh set it) holding examples/notes/schema.sql.
// It starts with the first example that asks for it; TestMain stops it.
type exampleServer struct {
	URL string

	stop func()
}

// exampleSecret signs the examples' tokens (HS256).
const exampleSecret = "client-examples-secret-0123456789abcdef"

var examples struct {
	once   sync.Once
	server *exampleServer
	err    error
}

// startExampleServer returns the examples' server, starting it once.
func startExampleServer() *exampleServer {
	examples.once.Do(func() { examples.server, examples.err = newExampleServer(context.Background()) })
	if examples.err != nil {
		panic(fmt.Sprintf("example server: %v", examples.err))
	}
	return examples.server
}

// Token is a Config.Token for user.
func (s *exampleServer) Token(user string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		return auth.MintHS256([]byte(exampleSecret), "sub", user, time.Hour, time.Now())
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if examples.server != nil {
		examples.server.stop()
	}
	os.Exit(code)
}

func newExampleServer(ctx context.Context) (*exampleServer, error) {
	base := os.Getenv("SYNCHRO_TEST_DATABASE_URL")
	if base == "" {
		return nil, fmt.Errorf("SYNCHRO_TEST_DATABASE_URL is not set; run the examples with `make test` or scripts/test.sh ./client")
	}
	name := fmt.Sprintf("client_examples_%d", os.Getpid())
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		return nil, err
	}
	url := strings.Replace(base, "/"+cfg.Database+"?", "/"+name+"?", 1)
	if !strings.Contains(url, "/"+name) {
		url = strings.Replace(base, "/"+cfg.Database, "/"+name, 1)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stops = append(stops, func() {
		drop, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = drop.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_, _ = drop.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
			drop.Close(context.Background())
		}
	})
	fail := func(err error) (*exampleServer, error) { stop(); return nil, err }

	if _, err := migrate.Apply(ctx, url, "synchro", quiet); err != nil {
		return fail(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, pool.Close)
	workerPool, err := wal.NewPool(ctx, url)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, workerPool.Close)
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wal.New(wal.Config{DatabaseURL: url, Slot: name, Publication: "synchro", WorkerID: "examples",
			IdleAckInterval: 100 * time.Millisecond, Log: quiet}, workerPool).Run(wctx)
	}()
	stops = append(stops, func() { cancel(); <-done })

	// The schema's seed rows are captured only once the stream has started.
	if err := waitTrue(ctx, pool, `SELECT EXISTS (SELECT FROM synchro.progress)`); err != nil {
		return fail(err)
	}
	schema, err := os.ReadFile("../examples/notes/schema.sql")
	if err != nil {
		return fail(err)
	}
	if _, err := pool.Exec(ctx, string(schema)); err != nil {
		return fail(err)
	}
	if _, err := pool.Exec(ctx, `SELECT synchro.configure_readiness('10 seconds', 1073741824, '60 seconds', current_database())`); err != nil {
		return fail(err)
	}
	var flushed string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&flushed); err != nil {
		return fail(err)
	}
	if err := waitTrue(ctx, pool, `SELECT synchro.is_ready() AND EXISTS (SELECT FROM synchro.progress WHERE processed_end_lsn >= '`+flushed+`'::pg_lsn)`); err != nil {
		return fail(err)
	}

	service, err := httpapi.ServicePool(ctx, url, 16)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, service.Close)
	authn, err := auth.New(auth.Config{Mode: auth.ModeJWT, HS256Secret: exampleSecret})
	if err != nil {
		return fail(err)
	}
	srv := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: service, Sync: &httpapi.Sync{
		Pool: service, Auth: authn, Limits: httpapi.DefaultLimits, CaptureWait: 10 * time.Second,
		PushLockTimeout: 5 * time.Second, Log: quiet,
	}}))
	stops = append(stops, srv.Close)
	return &exampleServer{URL: srv.URL, stop: stop}, nil
}

// waitTrue polls query (one boolean) until it answers true, for up to 30 s.
func waitTrue(ctx context.Context, pool *pgxpool.Pool, query string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		err := pool.QueryRow(ctx, query).Scan(&ok)
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %q: %v", query, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
