package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/config"
	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/live"
	"github.com/synchro-sync/synchro/internal/logging"
	"github.com/synchro-sync/synchro/internal/metrics"
	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/reset"
	"github.com/synchro-sync/synchro/internal/wal"
)

func main() {
	log := logging.New(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		log.Error("synchrod stopped", "error", err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("synchrod", flag.ContinueOnError)
	var common config.Common
	common.Register(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP listen address (env SYNCHRO_LISTEN)")
	runWorker := fs.Bool("worker", true, "run the WAL capture worker (one active per database; others stand by) (env SYNCHRO_WORKER)")
	host, _ := os.Hostname()
	workerID := fs.String("worker-id", fmt.Sprintf("%s-%d", host, os.Getpid()), "worker identity in heartbeats (env SYNCHRO_WORKER_ID)")
	heartbeat := fs.Duration("heartbeat-interval", time.Second, "worker heartbeat interval (env SYNCHRO_HEARTBEAT_INTERVAL)")
	maxHeartbeatAge := fs.Duration("max-heartbeat-age", 10*time.Second, "readiness: oldest fresh worker heartbeat (env SYNCHRO_MAX_HEARTBEAT_AGE)")
	maxWALLag := fs.Int64("max-wal-lag-bytes", 1<<30, "readiness: largest WAL lag of the slot in bytes (env SYNCHRO_MAX_WAL_LAG_BYTES)")
	maxCommitLag := fs.Duration("max-commit-lag", 60*time.Second, "readiness: largest capture commit lag (env SYNCHRO_MAX_COMMIT_LAG)")
	batchDelay := fs.Duration("capture-batch-delay", wal.DefaultBatchMaxDelay, "longest a captured transaction waits for its materialization batch while WAL keeps arriving (env SYNCHRO_CAPTURE_BATCH_DELAY)")
	quietGap := fs.Duration("capture-batch-quiet-gap", wal.DefaultBatchQuietGap, "a batch is materialized once the stream sent no WAL for this long (and none is in flight); 0: batches always wait --capture-batch-delay (env SYNCHRO_CAPTURE_BATCH_QUIET_GAP)")
	batchTxns := fs.Int("capture-batch-txns", 2000, "most transactions per materialization batch (env SYNCHRO_CAPTURE_BATCH_TXNS)")
	batchEvents := fs.Int("capture-batch-events", 10000, "most row events per materialization batch (env SYNCHRO_CAPTURE_BATCH_EVENTS)")
	spillBytes := fs.Int64("capture-spill-bytes", wal.DefaultSpillBytes, "row data of one source transaction the worker holds in memory; the rest waits in a temporary file (env SYNCHRO_CAPTURE_SPILL_BYTES)")
	spillDir := fs.String("capture-spill-dir", "", "directory of the worker's spill files; empty = $TMPDIR or /tmp (env SYNCHRO_CAPTURE_SPILL_DIR)")
	bootstrapInterval := fs.Duration("bootstrap-interval", 2*time.Second, "how often the worker looks for a relation waiting for its projection bootstrap (env SYNCHRO_BOOTSTRAP_INTERVAL)")
	historyRetention := fs.Duration("capture-history-retention", 7*24*time.Hour, "how long the history of a materialized transaction is kept: the pull history a cursor resumes from (effects, superseded row versions, closed membership edges, superseded scope digests; a client offline longer rebuilds its scopes) and the event ledger and write fences once acknowledged; 0 = for good (env SYNCHRO_CAPTURE_HISTORY_RETENTION)")
	var authConfig auth.Config
	authConfig.Register(fs)
	limits := httpapi.DefaultLimits
	fs.Int64Var(&limits.MaxBodyBytes, "max-body-bytes", limits.MaxBodyBytes, "largest sync request body (env SYNCHRO_MAX_BODY_BYTES)")
	fs.IntVar(&limits.MaxMutations, "max-mutations", limits.MaxMutations, "most mutations per push (env SYNCHRO_MAX_MUTATIONS)")
	fs.Int64Var(&limits.MaxPageBytes, "max-page-bytes", limits.MaxPageBytes, "rows of one pull or rebuild page, in bytes of their JSON text; a page has at least one row (env SYNCHRO_MAX_PAGE_BYTES)")
	fs.IntVar(&limits.MaxValueBytes, "max-value-bytes", limits.MaxValueBytes, "largest column value a push mutation may carry, in bytes of its JSON text; larger ones are rejected validation_failed (env SYNCHRO_MAX_VALUE_BYTES)")
	fs.IntVar(&limits.MaxPageSize, "max-page-size", limits.MaxPageSize, "largest pull or rebuild page; larger limits are capped (env SYNCHRO_MAX_PAGE_SIZE)")
	captureWait := fs.Duration("capture-wait", 2*time.Second, "how long pull and rebuild wait for a client's pushed changes to be captured before 503 capture_pending (env SYNCHRO_CAPTURE_WAIT)")
	httpPoolSize := fs.Int("http-pool-size", 16, "database connections of the sync requests (env SYNCHRO_HTTP_POOL_SIZE)")
	maxUserRequests := fs.Int("max-user-requests", 4, "most sync requests of one user in flight per process, at most --http-pool-size minus 1; more get 429 retry_later (env SYNCHRO_MAX_USER_REQUESTS)")
	maxBytesInFlight := fs.Int64("max-body-bytes-in-flight", 64<<20, "request body bytes of all sync requests in flight per process, at least --max-body-bytes; more get 503 retry_later (env SYNCHRO_MAX_BODY_BYTES_IN_FLIGHT)")
	maxPullWait := fs.Duration("max-pull-wait", 60*time.Second, "longest a pull may wait for changes (its wait_ms is capped at it); 0 = pulls never wait (env SYNCHRO_MAX_PULL_WAIT)")
	maxWaitingPulls := fs.Int("max-waiting-pulls", 20000, "most pulls waiting for changes per process; more get 503 retry_later (env SYNCHRO_MAX_WAITING_PULLS)")
	maxUserWaitingPulls := fs.Int("max-user-waiting-pulls", 16, "most pulls of one user waiting for changes per process; more get 503 retry_later (env SYNCHRO_MAX_USER_WAITING_PULLS)")
	pushLockTimeout := fs.Duration("push-lock-timeout", 5*time.Second, "how long a push mutation waits for a row lock before server_retryable (env SYNCHRO_PUSH_LOCK_TIMEOUT)")
	pushTimeout := fs.Duration("push-timeout", 30*time.Second, "longest run of one push transaction; a longer one is rolled back and answered 503 retry_later (env SYNCHRO_PUSH_TIMEOUT)")
	server := httpapi.DefaultServerConfig
	fs.DurationVar(&server.ReadHeaderTimeout, "read-header-timeout", server.ReadHeaderTimeout, "longest a client may take to send a request's headers (env SYNCHRO_READ_HEADER_TIMEOUT)")
	fs.DurationVar(&server.BodyReadTimeout, "body-read-timeout", server.BodyReadTimeout, "longest a client may take to send a request's body; then 408 request_timeout and the connection is closed (env SYNCHRO_BODY_READ_TIMEOUT)")
	maxConnections := fs.Int("max-connections", httpapi.DefaultMaxConnections(), "most HTTP connections open at a time; more wait to be accepted; default: the soft open-file limit minus 256, at most 10000 (env SYNCHRO_MAX_CONNECTIONS)")
	minProtocol := fs.Int("min-protocol-version", 3, "lowest protocol version connect accepts (env SYNCHRO_MIN_PROTOCOL_VERSION)")
	minAppVersion := fs.String("min-app-version", "", "lowest app_version connect accepts, dotted numbers; empty = any (env SYNCHRO_MIN_APP_VERSION)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if limits.MaxBodyBytes <= 0 || limits.MaxMutations <= 0 || limits.MaxPageSize <= 0 || limits.MaxPageBytes <= 0 || limits.MaxValueBytes <= 0 || *captureWait < 0 || *pushLockTimeout <= 0 {
		return fmt.Errorf("--max-body-bytes, --max-mutations, --max-page-size, --max-page-bytes, --max-value-bytes and --push-lock-timeout must be positive, --capture-wait not negative")
	}
	limits.DefaultPageSize = min(limits.DefaultPageSize, limits.MaxPageSize)
	authenticator, err := auth.NewContext(ctx, authConfig)
	if err != nil {
		return err
	}
	if err := auth.CheckListen(authConfig, *listen); err != nil {
		return err
	}
	switch {
	case authConfig.Mode == "":
		log.Warn("authentication is not configured: every sync request is refused (set SYNCHRO_AUTH_MODE)")
	case authConfig.Mode == auth.ModeJWT && (authConfig.Issuer == "" || authConfig.Audience == ""):
		log.Warn("jwt mode without --jwt-issuer or --jwt-audience: tokens another service was issued for are accepted too")
	}
	if *maxHeartbeatAge <= 0 || *maxWALLag <= 0 || *maxCommitLag <= 0 {
		return fmt.Errorf("--max-heartbeat-age, --max-wal-lag-bytes and --max-commit-lag must be positive")
	}
	if *heartbeat <= 0 || *maxUserRequests <= 0 || *httpPoolSize < 2 || *maxUserRequests >= *httpPoolSize {
		return fmt.Errorf("--heartbeat-interval and --max-user-requests must be positive, --http-pool-size at least 2 and above --max-user-requests")
	}
	if server.ReadHeaderTimeout <= 0 || server.BodyReadTimeout <= 0 || *maxConnections <= 0 {
		return fmt.Errorf("--read-header-timeout, --body-read-timeout and --max-connections must be positive")
	}
	if *pushTimeout < *pushLockTimeout || *maxBytesInFlight < limits.MaxBodyBytes {
		return fmt.Errorf("--push-timeout must be at least --push-lock-timeout and --max-body-bytes-in-flight at least --max-body-bytes")
	}
	if *batchDelay <= 0 || *batchTxns <= 0 || *batchEvents <= 0 || *quietGap < 0 {
		return fmt.Errorf("--capture-batch-delay, --capture-batch-txns and --capture-batch-events must be positive, --capture-batch-quiet-gap not negative")
	}
	if *maxPullWait < 0 || *maxWaitingPulls <= 0 || *maxUserWaitingPulls <= 0 {
		return fmt.Errorf("--max-pull-wait must not be negative, --max-waiting-pulls and --max-user-waiting-pulls positive")
	}
	if *spillBytes <= 0 || *historyRetention < 0 {
		return fmt.Errorf("--capture-spill-bytes must be positive and --capture-history-retention not negative")
	}
	if err := common.Validate(); err != nil {
		return err
	}

	// pool serves the startup statements and the metrics scrapes; HTTP sync
	// requests have servicePool, readiness opsPool (never behind user traffic),
	// the worker a pool of its own (wal.NewPool).
	pool, err := pgxpool.New(ctx, common.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database URL: %w", err)
	}
	defer pool.Close()
	servicePool, err := httpapi.ServicePool(ctx, common.DatabaseURL, int32(*httpPoolSize))
	if err != nil {
		return err
	}
	defer servicePool.Close()
	opsPool, err := httpapi.OpsPool(ctx, common.DatabaseURL)
	if err != nil {
		return err
	}
	defer opsPool.Close()
	if err := migrate.Check(ctx, pool); err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	// Readiness limits of this database (synchro.readiness); the last synchrod to start sets them.
	q := db.New(pool)
	if err := q.ConfigureReadiness(ctx, db.ConfigureReadinessParams{
		HeartbeatMaxAgeUs: maxHeartbeatAge.Microseconds(), WalLagLimitBytes: *maxWALLag, CommitLagLimitUs: maxCommitLag.Microseconds(),
	}); err != nil {
		return fmt.Errorf("configure readiness: %w", err)
	}
	if err := q.ConfigureProtocol(ctx, db.ConfigureProtocolParams{MinProtocolVersion: int64(*minProtocol), MinAppVersion: *minAppVersion}); err != nil {
		return fmt.Errorf("configure protocol: %w", err)
	}

	// Listen before the worker starts: a taken address fails the start before
	// the worker may create the capture stream.
	ln, err := httpapi.Listen(*listen, *maxConnections)
	if err != nil {
		return err
	}
	defer ln.Close()
	m := metrics.New(pool)
	workerDone := make(chan error, 1)
	if *runWorker {
		workerPool, err := wal.NewPool(ctx, common.DatabaseURL)
		if err != nil {
			return fmt.Errorf("database URL: %w", err)
		}
		defer workerPool.Close()
		w := wal.New(wal.Config{
			DatabaseURL: common.DatabaseURL, Slot: common.Slot, Publication: common.Publication,
			WorkerID: *workerID, HeartbeatInterval: *heartbeat, Log: log, Metrics: m,
			BatchMaxDelay: *batchDelay, BatchQuietGap: cmp.Or(*quietGap, -1), BatchMaxTxns: *batchTxns, BatchMaxEvents: *batchEvents,
			SpillBytes: *spillBytes, SpillDir: *spillDir, HistoryRetention: *historyRetention,
		}, workerPool)
		go func() { workerDone <- w.Run(ctx) }()
		// Relations registered while they held rows are served once their
		// projection bootstrap, run here, is activated by the worker.
		go reset.RunBootstraps(ctx, workerPool, reset.Config{
			DatabaseURL: common.DatabaseURL, Publication: common.Publication, Reason: "registration of a populated relation", Log: log,
		}, *bootstrapInterval)
	}

	// Pulls that wait for changes are woken by one LISTEN connection (beside
	// the sync pool); it stops with the signal, answering them.
	var hub *live.Hub
	if *maxPullWait > 0 {
		hub = live.NewHub(servicePool, *maxWaitingPulls, *maxUserWaitingPulls, log)
		go hub.Run(ctx)
		m.WatchWaitingPulls(hub.Waiting)
	}
	router := httpapi.NewRouter(httpapi.Deps{Pool: opsPool, Metrics: m, Sync: &httpapi.Sync{
		Pool: servicePool, Auth: authenticator, Limits: limits, CaptureWait: *captureWait,
		PushLockTimeout: *pushLockTimeout, PushTimeout: *pushTimeout, Log: log, Metrics: m,
		MaxUserRequests: *maxUserRequests, MaxBytesInFlight: *maxBytesInFlight,
		Live: hub, MaxPullWait: *maxPullWait,
	}})
	srv := httpapi.NewServer(router, server)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("synchrod listening", "address", ln.Addr().String())

	select {
	case err := <-errc:
		return err
	case err := <-workerDone:
		if ctx.Err() == nil {
			return fmt.Errorf("worker: %w", err)
		}
		workerDone <- err // it ended with the signal: the shutdown below waits for it
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log.Info("synchrod shutting down")
	err = srv.Shutdown(shutdownCtx)
	if *runWorker {
		// The worker ends its session and records its state stopped before its
		// pool closes.
		select {
		case <-workerDone:
		case <-shutdownCtx.Done():
			log.Warn("the worker did not stop within the shutdown timeout")
		}
	}
	return err
}
