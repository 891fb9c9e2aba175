package tests

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/metrics"
	"github.com/synchro-sync/synchro/internal/testdb"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return string(body)
}

// metricValue returns the value of the sample whose line starts with series.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no sample %s in metrics", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMetricsExportCaptureAndHTTP(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ownedDocs(t, d)
	m := metrics.New(d.Pool)
	cfg := workerConfig(d, "metrics")
	cfg.Metrics = m
	startStreaming(t, d, cfg)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	srv := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: d.Pool, Metrics: m}))
	defer srv.Close()

	d.Exec(t, `INSERT INTO app.docs SELECT g, 'u' || g % 3 FROM generate_series(1, 7) g`)
	d.Exec(t, `UPDATE app.docs SET owner = 'x' WHERE id = 1`)
	waitMaterialized(t, d)
	if resp, err := http.Get(srv.URL + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v", err)
	}

	// The worker counts a batch after acknowledging it, a moment after the
	// database shows it materialized.
	var body string
	waitFor(t, "batch metrics", 30*time.Second, func() (bool, error) {
		body = scrape(t, srv.URL)
		return metricValue(t, body, "synchro_materialized_transactions_total") >= 2, nil
	})
	if got := metricValue(t, body, "synchro_materialized_rows_total"); got < 8 {
		t.Fatalf("materialized rows %v, want >= 8", got)
	}
	if got := metricValue(t, body, "synchro_batch_transactions_count"); got < 1 {
		t.Fatalf("batches %v", got)
	}
	if metricValue(t, body, "synchro_capture_state_up") != 1 || metricValue(t, body, "synchro_poison_transactions") != 0 {
		t.Fatalf("capture state not read:\n%s", body)
	}
	metricValue(t, body, "synchro_capture_lag_bytes")
	metricValue(t, body, "synchro_capture_lag_seconds")
	// The test cluster keeps WAL for slots without limit: reserved, no safe size.
	for status, want := range map[string]float64{"reserved": 1, "extended": 0, "unreserved": 0, "lost": 0} {
		if got := metricValue(t, body, `synchro_capture_slot_wal_status{status="`+status+`"}`); got != want {
			t.Fatalf("slot wal_status %s: %v, want %v", status, got, want)
		}
	}
	if strings.Contains(body, "\nsynchro_capture_slot_safe_wal_bytes ") {
		t.Fatal("a safe WAL size exported while max_slot_wal_keep_size is unlimited")
	}
	if got := metricValue(t, body, `synchro_http_requests_total{code="200",route="/healthz"}`); got != 1 {
		t.Fatalf("healthz requests %v, want 1", got)
	}
	if !strings.Contains(body, `synchro_http_request_duration_seconds_bucket{route="/healthz"`) {
		t.Fatal("no request latency histogram for /healthz")
	}

	// Readiness: every check and the whole, as synchro.readiness answers.
	waitFor(t, "synchro_ready 1", 30*time.Second, func() (bool, error) {
		body = scrape(t, srv.URL)
		return metricValue(t, body, "synchro_ready") == 1, nil
	})
	for _, check := range readinessOrder {
		if got := metricValue(t, body, `synchro_readiness_check{check="`+check+`"}`); got != 1 {
			t.Fatalf("readiness check %s: %v, want 1", check, got)
		}
	}

	// The retention horizon's age: absent while nothing was pruned, then how
	// long ago the transaction at the horizon was materialized.
	if strings.Contains(body, "\nsynchro_history_horizon_age_seconds ") {
		t.Fatal("a retention horizon age exported while nothing was pruned")
	}
	d.Exec(t, `SELECT synchro.prune_history('0', 1000, now())`)
	body = scrape(t, srv.URL)
	if age := metricValue(t, body, "synchro_history_horizon_age_seconds"); age <= 0 || age > 60 {
		t.Fatalf("retention horizon age %v s, want the seconds since the last transaction was materialized", age)
	}

	// A poison transaction shows in the poison gauge, the poison check and
	// synchro_ready.
	d.Exec(t, `ALTER TABLE app.docs DISABLE TRIGGER synchro_fence; INSERT INTO app.docs VALUES (100, 'u1')`)
	waitFor(t, "the poison gauge at 1", 30*time.Second, func() (bool, error) {
		body = scrape(t, srv.URL)
		return metricValue(t, body, "synchro_poison_transactions") == 1, nil
	})
	waitFor(t, "synchro_ready 0 with the poison check failing", 30*time.Second, func() (bool, error) {
		body = scrape(t, srv.URL)
		return metricValue(t, body, "synchro_ready") == 0 && metricValue(t, body, `synchro_readiness_check{check="poison"}`) == 0, nil
	})
}

// TestMetricsReadinessFailsClosed: synchro_ready is 0, never absent, when
// readiness is not known to pass: before any worker started a stream (every
// check still exported), and when the database cannot be reached (docs/change-stream.md,
// "Readiness": unavailable readiness data is unready). An alert on
// synchro_ready == 0 must fire in both cases.
func TestMetricsReadinessFailsClosed(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	srv := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: d.Pool, Metrics: metrics.New(d.Pool)}))
	defer srv.Close()
	body := scrape(t, srv.URL)
	if got := metricValue(t, body, "synchro_ready"); got != 0 {
		t.Fatalf("synchro_ready %v without a stream, want 0", got)
	}
	for _, check := range readinessOrder {
		metricValue(t, body, `synchro_readiness_check{check="`+check+`"}`)
	}
	if got := metricValue(t, body, `synchro_readiness_check{check="slot"}`); got != 0 {
		t.Fatalf("readiness check slot %v without a stream, want 0", got)
	}

	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = freeAddr(t)
	unreachable, err := pgxpool.New(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer unreachable.Close()
	down := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: unreachable, Metrics: metrics.New(unreachable)}))
	defer down.Close()
	body = scrape(t, down.URL)
	if metricValue(t, body, "synchro_capture_state_up") != 0 || metricValue(t, body, "synchro_ready") != 0 {
		t.Fatalf("metrics with the database unreachable:\n%s", body)
	}
}

// TestSynchrodWorkerPoolIsItsOwn: synchrod's metrics scrapes run on a pool the
// capture worker does not share. Scrapes waiting on a lock (here on
// synchro.readiness, which the worker never reads; a slow readiness evaluation
// does the same for up to the scrape's 2 s) held every connection the worker's
// session did not, and the worker's acknowledgements and heartbeats queued
// behind them: capture stalled while the scrapes went on.
func TestSynchrodWorkerPoolIsItsOwn(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(buildCommands(t), "synchrod")
	d := testdb.New(t)
	sharedDocs(t, d)
	addr, slot := freeAddr(t), synchrodSlot()
	// pool_max_conns sizes synchrod's pools alike, whatever the number of CPUs.
	startSynchrod(t, d, bin, addr, slot, "--database-url", d.URL+"&pool_max_conns=4", "--listen", addr, "--slot", slot,
		"--worker-id", "w1", "--heartbeat-interval", "100ms")
	waitState(t, d, "w1", "streaming")

	ctx := context.Background()
	locker, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx) //nolint:errcheck
	if _, err := locker.Exec(ctx, `LOCK TABLE synchro.readiness IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// More scrapers than the pool has connections, until the test ends.
	stop := make(chan struct{})
	var scrapers sync.WaitGroup
	defer scrapers.Wait()
	defer close(stop)
	client := &http.Client{Timeout: 30 * time.Second}
	for range 12 {
		scrapers.Add(1)
		go func() {
			defer scrapers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if resp, err := client.Get("http://" + addr + "/metrics"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	waitFor(t, "scrapes waiting on the lock", 30*time.Second, func() (bool, error) {
		var n int
		err := d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%synchro.readiness%'`).Scan(&n)
		return n >= 2, err
	})

	c := commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'captured beside the scrapes')`)
	target := queryText(t, d, `SELECT pg_current_wal_flush_lsn()::text`)
	waitFor(t, "acknowledgement while scrapes hold their pool", 10*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM synchro.progress WHERE acknowledged_end_lsn >= $1::pg_lsn)`, target).Scan(&ok)
		return ok, err
	})
	requireMaterializedOnce(t, d, 1, c)
}
