package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/db"
)

// readinessTimeout bounds the readiness query: a database that does not answer
// in time is unready.
const readinessTimeout = 5 * time.Second

// readinessCheck is one row of synchro.readiness (db.ListReadiness: a NULL ok
// is unknown, and unknown is not ok).
type readinessCheck struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason"`
}

type readinessBody struct {
	Ready  bool             `json:"ready"`
	Checks []readinessCheck `json:"checks"`
}

// readyz reports capture readiness (docs/change-stream.md, "Readiness") from synchro.readiness:
// 200 only when the view has rows and every one is ok, else 503. It is
// fail-closed: a database error (or timeout) is a failed "database" check whose
// reason never carries the error text.
func readyz(pool *pgxpool.Pool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		checks, err := readiness(r.Context(), pool)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, readinessBody{Checks: []readinessCheck{
				{Check: "database", OK: false, Reason: "database unreachable"},
			}})
			return
		}
		body := readinessBody{Ready: len(checks) > 0, Checks: checks}
		for _, c := range checks {
			body.Ready = body.Ready && c.OK
		}
		status := http.StatusOK
		if !body.Ready {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, body)
	}
}

func readiness(ctx context.Context, pool *pgxpool.Pool) ([]readinessCheck, error) {
	if pool == nil {
		return nil, errNoPool
	}
	ctx, cancel := context.WithTimeout(ctx, readinessTimeout)
	defer cancel()
	rows, err := db.New(pool).ListReadiness(ctx)
	if err != nil {
		return nil, err
	}
	checks := make([]readinessCheck, 0, len(rows))
	for _, c := range rows {
		checks = append(checks, readinessCheck{Check: c.Check, OK: c.Ok, Reason: c.Reason})
	}
	return checks, nil
}

var errNoPool = errors.New("no database pool")
