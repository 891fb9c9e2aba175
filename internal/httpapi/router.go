// Package httpapi is Synchro's HTTP layer: routing, and the translation between
// HTTP and the SQL entry points. It holds no sync logic of its own.
package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/metrics"
)

// Deps is what the handlers need.
type Deps struct {
	Pool *pgxpool.Pool
	// Metrics, when set, serves GET /metrics and counts every request.
	Metrics *metrics.Metrics
	// Sync, when set, serves the sync protocol endpoints (/sync/...).
	Sync *Sync
}

// NewRouter returns the HTTP handler of synchrod.
func NewRouter(d Deps) http.Handler {
	r := mux.NewRouter()
	r.Use(d.Metrics.Middleware)
	r.HandleFunc("/healthz", healthz).Methods(http.MethodGet)
	r.HandleFunc("/readyz", readyz(d.Pool)).Methods(http.MethodGet)
	if d.Metrics != nil {
		r.Handle("/metrics", d.Metrics.Handler()).Methods(http.MethodGet)
	}
	if d.Sync != nil {
		d.Sync.routes(r)
	}
	return r
}

// healthz is process liveness only: it never reports capture readiness.
func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
