package httpapi

import (
	"net/http"
	"time"
)

// Timeouts of the HTTP server synchrod runs.
const (
	// ReadHeaderTimeout bounds how long a client may take to send a request's
	// headers (a client trickling them would hold its connection for good).
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes a keep-alive connection that has waited this long for
	// its next request. It is longer than the usual idle timeout of a load
	// balancer in front (60 s), so the balancer, not Synchro, closes first.
	IdleTimeout = 120 * time.Second
)

// NewServer is synchrod's HTTP server of handler. It sets no overall read or
// write timeout: a pull may wait for capture, and a body may be large on a slow
// link.
func NewServer(handler http.Handler) *http.Server {
	return &http.Server{Handler: handler, ReadHeaderTimeout: ReadHeaderTimeout, IdleTimeout: IdleTimeout}
}
