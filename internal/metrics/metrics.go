package metrics

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/synchro-sync/synchro/internal/db"
)

// Metrics holds the collectors of one synchrod process.
type Metrics struct {
	registry      *prometheus.Registry
	transactions  prometheus.Counter
	rows          prometheus.Counter
	batchSize     prometheus.Histogram
	batchDuration prometheus.Histogram
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	syncErrors    *prometheus.CounterVec
	pushOutcomes  *prometheus.CounterVec
	pruned        prometheus.Counter
	historyPruned prometheus.Counter
	spilledTxns   prometheus.Counter
	spilledBytes  prometheus.Counter
}

// New registers every collector; capture lag and poison state are read from
// pool at each scrape.
func New(pool *pgxpool.Pool) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		transactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_materialized_transactions_total", Help: "Source transactions materialized by this process's worker."}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_materialized_rows_total", Help: "Applicable row events materialized by this process's worker."}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "synchro_batch_transactions", Help: "Source transactions per materialization batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "synchro_batch_duration_seconds", Help: "Time to prepare, materialize and acknowledge one batch, including any wait for the batch before it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "synchro_http_requests_total", Help: "HTTP requests by route and status."}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "synchro_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: prometheus.DefBuckets}, []string{"route"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "synchro_sync_errors_total", Help: "Sync protocol error answers by endpoint and error code."}, []string{"endpoint", "code"}),
		pushOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "synchro_push_mutations_total", Help: "Push mutation outcomes: applied, or the rejection code."}, []string{"outcome"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_capture_history_pruned_events_total", Help: "Event-ledger rows and their write fences pruned by this process's worker."}),
		historyPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_history_pruned_rows_total", Help: "Effects, row versions, membership edges and scope digests behind the retention horizon pruned by this process's worker."}),
		spilledTxns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_capture_spilled_transactions_total", Help: "Source transactions received whose row data passed the spill threshold (held partly in a temporary file)."}),
		spilledBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_capture_spilled_bytes_total", Help: "Row data of received source transactions written to spill files."}),
	}
	m.registry.MustRegister(m.transactions, m.rows, m.batchSize, m.batchDuration, m.httpRequests, m.httpDuration,
		m.syncErrors, m.pushOutcomes, m.pruned, m.historyPruned, m.spilledTxns, m.spilledBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&captureCollector{pool: pool})
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// ObserveBatch records one materialized batch.
func (m *Metrics) ObserveBatch(transactions, rows int, d time.Duration) {
	if m == nil {
		return
	}
	m.transactions.Add(float64(transactions))
	m.rows.Add(float64(rows))
	m.batchSize.Observe(float64(transactions))
	m.batchDuration.Observe(d.Seconds())
}

// WatchWaitingPulls exports waiting (read at each scrape) as
// synchro_waiting_pulls: the pulls of this process waiting for changes.
func (m *Metrics) WatchWaitingPulls(waiting func() int) {
	if m == nil {
		return
	}
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "synchro_waiting_pulls", Help: "Pulls of this process waiting for changes of their scopes (wait_ms)."},
		func() float64 { return float64(waiting()) }))
}

// ObservePruned records capture history pruned: events event-ledger rows and their fences.
func (m *Metrics) ObservePruned(events int64) {
	if m == nil {
		return
	}
	m.pruned.Add(float64(events))
}

// ObserveHistoryPruned records rows of the pull history pruned behind the
// retention horizon.
func (m *Metrics) ObserveHistoryPruned(rows int64) {
	if m == nil {
		return
	}
	m.historyPruned.Add(float64(rows))
}

// ObserveSpill records a received source transaction that spilled bytes of row
// data to its spill file.
func (m *Metrics) ObserveSpill(bytes int64) {
	if m == nil {
		return
	}
	m.spilledTxns.Inc()
	m.spilledBytes.Add(float64(bytes))
}

// Middleware counts requests and their latency per route template and status.
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := "unmatched"
		if cur := mux.CurrentRoute(r); cur != nil {
			if tpl, err := cur.GetPathTemplate(); err == nil {
				route = tpl
			}
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(rec, r)
		m.httpRequests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
		m.httpDuration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// captureCollector reads capture lag and poison state from the database.
type captureCollector struct {
	pool *pgxpool.Pool
}

var (
	lagBytesDesc = prometheus.NewDesc("synchro_capture_lag_bytes",
		"WAL bytes between the current flush position and the slot's acknowledged position.", nil, nil)
	lagSecondsDesc = prometheus.NewDesc("synchro_capture_lag_seconds",
		"Commit lag: an upper bound on how long a committed source transaction has waited to be materialized (synchro.commit_lag; 0 when caught up; absent while unknown).", nil, nil)
	poisonDesc = prometheus.NewDesc("synchro_poison_transactions",
		"Blocking poison transactions of the active stream.", nil, nil)
	upDesc = prometheus.NewDesc("synchro_capture_state_up",
		"1 when capture state could be read from the database.", nil, nil)
	readyDesc = prometheus.NewDesc("synchro_ready",
		"1 when every readiness check passes (synchro.is_ready(); what GET /readyz answers 200 for).", nil, nil)
	checkDesc = prometheus.NewDesc("synchro_readiness_check",
		"1 when the readiness check passes, 0 when it fails (synchro.readiness).", []string{"check"}, nil)
	slotStatusDesc = prometheus.NewDesc("synchro_capture_slot_wal_status",
		"1 for the stream's slot's wal_status (pg_replication_slots), 0 for the others; unreserved: the next checkpoint may invalidate it (lost).",
		[]string{"status"}, nil)
	resetPhaseDesc = prometheus.NewDesc("synchro_reset_phase",
		"1 for the phase of the stream reset or projection bootstrap in progress (staging, catching_up, ready), 0 for the others; all 0 while none is.",
		[]string{"phase"}, nil)
	resetRowsDesc = prometheus.NewDesc("synchro_reset_rows_staged",
		"Rows the baseline of the stream reset or projection bootstrap in progress staged (0 until the baseline commits); absent while none is in progress.", nil, nil)
	resetLagDesc = prometheus.NewDesc("synchro_reset_catch_up_lag_bytes",
		"WAL bytes between the staged catch-up of the stream reset or projection bootstrap in progress and its barrier (before the barrier: the current WAL position); absent unless one is catching up.", nil, nil)
	bootstrapDesc = prometheus.NewDesc("synchro_bootstrap_in_progress",
		"1 while the one in progress is a projection bootstrap or registry change (the tables already served stay ready), 0 otherwise.", nil, nil)
	horizonAgeDesc = prometheus.NewDesc("synchro_history_horizon_age_seconds",
		"Seconds since the transaction at the pull history's retention horizon was materialized: how far back a cursor still resumes (about --capture-history-retention while pruning keeps up); absent while nothing was pruned.", nil, nil)
	slotSafeDesc = prometheus.NewDesc("synchro_capture_slot_safe_wal_bytes",
		"WAL bytes that can still be written before the stream's slot is in danger of invalidation (pg_replication_slots.safe_wal_size); absent while max_slot_wal_keep_size is unlimited.", nil, nil)
)

// slotStatuses are the wal_status values of a slot that reserves WAL.
var slotStatuses = []string{"reserved", "extended", "unreserved", "lost"}

func (c *captureCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagBytesDesc
	ch <- lagSecondsDesc
	ch <- poisonDesc
	ch <- upDesc
	ch <- readyDesc
	ch <- checkDesc
	ch <- slotStatusDesc
	ch <- slotSafeDesc
	ch <- horizonAgeDesc
	ch <- resetPhaseDesc
	ch <- resetRowsDesc
	ch <- resetLagDesc
	ch <- bootstrapDesc
}

func (c *captureCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Readiness on its own: its checks are known before any stream exists, and
	// readiness that cannot be read is synchro_ready 0, never a missing sample
	// (fail-closed, like synchro.is_ready).
	ready := 0.0
	if checks, err := readiness(ctx, c.pool); err == nil {
		ready = 1
		for check, ok := range checks {
			ch <- prometheus.MustNewConstMetric(checkDesc, prometheus.GaugeValue, gauge(ok), check)
			ready = min(ready, gauge(ok))
		}
	}
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, ready)
	collectReset(ctx, c.pool, ch)
	st, err := db.New(c.pool).GetCaptureState(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(lagBytesDesc, prometheus.GaugeValue, st.LagBytes)
	if st.CommitLagKnown {
		ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, st.CommitLagSeconds)
	}
	ch <- prometheus.MustNewConstMetric(poisonDesc, prometheus.GaugeValue, st.Poison)
	for _, status := range slotStatuses {
		ch <- prometheus.MustNewConstMetric(slotStatusDesc, prometheus.GaugeValue, gauge(st.WalStatus.Valid && st.WalStatus.String == status), status)
	}
	if st.SafeWalSize.Valid { // NULL: no safe size
		ch <- prometheus.MustNewConstMetric(slotSafeDesc, prometheus.GaugeValue, float64(st.SafeWalSize.Int64))
	}
	if st.HorizonKnown {
		ch <- prometheus.MustNewConstMetric(horizonAgeDesc, prometheus.GaugeValue, st.HorizonAgeSeconds)
	}
}

// resetPhases are the phases of a stream reset in progress.
var resetPhases = []string{"staging", "catching_up", "ready"}

// collectReset exports the phase, staged rows and catch-up lag of the stream
// reset or projection bootstrap in progress, and whether it is a bootstrap;
// nothing when they cannot be read.
func collectReset(ctx context.Context, pool *pgxpool.Pool, ch chan<- prometheus.Metric) {
	resets, err := db.New(pool).ResetStatus(ctx)
	if err != nil {
		return
	}
	var cur *db.ResetStatusRow
	for i, r := range resets {
		if slices.Contains(resetPhases, r.Phase) {
			cur = &resets[i]
			break
		}
	}
	for _, phase := range resetPhases {
		ch <- prometheus.MustNewConstMetric(resetPhaseDesc, prometheus.GaugeValue, gauge(cur != nil && cur.Phase == phase), phase)
	}
	ch <- prometheus.MustNewConstMetric(bootstrapDesc, prometheus.GaugeValue, gauge(cur != nil && cur.Kind == "bootstrap"))
	if cur == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(resetRowsDesc, prometheus.GaugeValue, float64(cur.RowsStaged))
	if cur.Phase == "catching_up" {
		ch <- prometheus.MustNewConstMetric(resetLagDesc, prometheus.GaugeValue, float64(cur.DistanceBytes))
	}
}

// readiness reads every readiness check's outcome; none read is an error
// (fail-closed, like synchro.is_ready).
func readiness(ctx context.Context, pool *pgxpool.Pool) (map[string]bool, error) {
	checks, err := db.New(pool).ListReadiness(ctx)
	if err != nil {
		return nil, err
	}
	if len(checks) == 0 {
		return nil, errors.New("synchro.readiness returned no checks")
	}
	out := map[string]bool{}
	for _, c := range checks {
		out[c.Check] = c.Ok
	}
	return out, nil
}

func gauge(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

// ObserveSyncError counts one sync protocol error answer.
func (m *Metrics) ObserveSyncError(endpoint, code string) {
	if m == nil {
		return
	}
	m.syncErrors.WithLabelValues(endpoint, code).Inc()
}

// ObservePushOutcome counts one push mutation outcome ("applied" or the
// rejection code).
func (m *Metrics) ObservePushOutcome(outcome string) {
	if m == nil {
		return
	}
	m.pushOutcomes.WithLabelValues(outcome).Inc()
}
