package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro-sync/synchro/internal/dberr"
)

// apiError is a protocol error answer (docs/protocol.md, "Errors").
type apiError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter int // seconds; 0 = no Retry-After header
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// retryable is the protocol's retryable flag of each code.
var retryable = map[string]bool{"retry_later": true, "request_timeout": true, "capture_pending": true, "not_ready": true, "internal": true,
	"rebuild_expired": true}

func badRequest(msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: msg}
}

// fromDatabase translates an error of a SQL entry point: a refusal raised by
// synchro.refuse (SQLSTATE SY<status>, protocol code as HINT, client-safe
// message) becomes that answer; anything else is a 500 whose message and log
// line carry no SQL text, row data or secrets (the log keeps the SQLSTATE).
func fromDatabase(err error, log *slog.Logger, op string) *apiError {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && strings.HasPrefix(pg.Code, "SY") {
		if status, convErr := strconv.Atoi(pg.Code[2:]); convErr == nil && pg.Hint != "" {
			e := &apiError{Status: status, Code: pg.Hint, Message: pg.Message}
			if status == http.StatusServiceUnavailable {
				e.RetryAfter = 1
			}
			return e
		}
	}
	sqlstate := ""
	if pg != nil {
		sqlstate = pg.Code
	}
	return internalError(log, op, sqlstate, errorClass(err))
}

// renderFailed answers a push whose committed outcome could not be rendered in
// wire form (a bug, never the client's): a 500 whose log line names the class,
// not the value.
func renderFailed(log *slog.Logger) *apiError {
	return internalError(log, "push", "", "render")
}

func internalError(log *slog.Logger, op, sqlstate, class string) *apiError {
	log.Error("sync request failed", "op", op, "sqlstate", sqlstate, "error_class", class)
	return &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; retry later"}
}

// errorClass names the kind of a non-database error without its text.
func errorClass(err error) string {
	var pg *pgconn.PgError
	switch {
	case errors.As(err, &pg):
		return "database"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	default:
		return "connection"
	}
}

// writeError answers e with the protocol's error body.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	body := map[string]any{"error": map[string]any{
		"code": e.Code, "message": e.Message, "retryable": retryable[e.Code],
	}}
	if e.Code == "upgrade_required" {
		body["schema"] = map[string]string{"action": "unsupported"} // connect's schema action
	}
	writeJSON(w, e.Status, body)
}

// pushTimedOut reports whether err is the statement timeout of a push
// (SQLSTATE 57014 query_canceled): its transaction was rolled back.
func pushTimedOut(err error) bool {
	return dberr.SQLState(err) == "57014"
}
