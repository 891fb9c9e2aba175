package tests

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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

	// A poison transaction shows in the poison gauge.
	d.Exec(t, `ALTER TABLE app.docs DISABLE TRIGGER synchro_fence; INSERT INTO app.docs VALUES (100, 'u1')`)
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(t, scrape(t, srv.URL), "synchro_poison_transactions") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("poison gauge never reached 1")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
