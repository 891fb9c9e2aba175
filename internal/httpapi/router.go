package httpapi

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/metrics"
)

// Deps is what the handlers need.
type Deps struct {
	// Pool serves /readyz: a pool apart from Sync.Pool (OpsPool), so that
	// readiness never waits behind user traffic.
	Pool *pgxpool.Pool
	// Metrics, when set, serves GET /metrics and counts every request.
	Metrics *metrics.Metrics
	// Sync, when set, serves the sync protocol endpoints (/sync/...).
	Sync *Sync
}

// NewRouter returns the HTTP handler of synchrod.
func NewRouter(d Deps) http.Handler {
	// SkipClean: a path that is not canonical (//sync/push, /sync/./push) is a
	// 404, never a redirect, which a client would follow with a GET.
	r := mux.NewRouter().SkipClean(true)
	r.Use(d.Metrics.Middleware)
	r.NotFoundHandler = d.Metrics.Middleware(http.HandlerFunc(notFound))
	r.MethodNotAllowedHandler = d.Metrics.Middleware(methodNotAllowed(r))
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

// notFound answers a path that is no endpoint with the protocol's error body.
func notFound(w http.ResponseWriter, _ *http.Request) {
	writeError(w, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no endpoint at this path"})
}

// methodNotAllowed answers a method that the endpoint of the path does not
// serve with the protocol's error body and an Allow header listing those that
// it does.
func methodNotAllowed(router *mux.Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var allow []string
		seen := map[string]bool{}
		_ = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
			methods, _ := route.GetMethods()
			for _, m := range methods {
				if seen[m] {
					continue
				}
				seen[m] = true
				var match mux.RouteMatch
				probe := req.Clone(req.Context())
				probe.Method = m
				if router.Match(probe, &match) && match.MatchErr == nil {
					allow = append(allow, m)
				}
			}
			return nil
		})
		sort.Strings(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: "this endpoint does not serve this method; the Allow header lists those it does"})
	})
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
