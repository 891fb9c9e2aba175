package tests

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
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
// check still exported), and when the database cannot be reached (ADR 001,
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
