package httpapi

import (
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
)

// ServerConfig bounds what one connection may hold of the HTTP server
// synchrod runs.
type ServerConfig struct {
	// ReadHeaderTimeout bounds how long a client may take to send a request's
	// headers (a client trickling them would hold its connection for good).
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds how long a client may take to send a request's
	// body, from the end of its headers: a body that has not arrived by then is
	// answered 408 request_timeout and the connection is closed. 0 = unbounded.
	BodyReadTimeout time.Duration
}

// DefaultServerConfig is the configuration synchrod uses unless told otherwise.
var DefaultServerConfig = ServerConfig{ReadHeaderTimeout: 10 * time.Second, BodyReadTimeout: 30 * time.Second}

// IdleTimeout closes a keep-alive connection that has waited this long for
// its next request. It is longer than the usual idle timeout of a load
// balancer in front (60 s), so the balancer, not Synchro, closes first.
const IdleTimeout = 120 * time.Second

// NewServer is synchrod's HTTP server of handler. It sets no overall write
// timeout (a pull may wait for capture) and bounds reading a request (headers,
// then body) as c says. A request whose handler leaves its body unread (an
// early refusal: unauthenticated, over a limit) has its connection closed at
// once instead of waiting for the rest of the body.
func NewServer(handler http.Handler, c ServerConfig) *http.Server {
	return &http.Server{Handler: bodyDeadline(handler, c.BodyReadTimeout), ReadHeaderTimeout: c.ReadHeaderTimeout, IdleTimeout: IdleTimeout}
}

// bodyDeadline sets the read deadline of a request with a body to timeout
// from now, lifts it once the body has been read to its end (a handler that
// runs long must not have its connection's background read time out), and,
// when the handler returns with the body unread, expires it: the server's
// attempt to read the rest of the body (to reuse the connection) then fails at
// once and the connection is closed.
func bodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if timeout > 0 {
			_ = rc.SetReadDeadline(time.Now().Add(timeout))
		}
		body := &deadlineBody{ReadCloser: r.Body, rc: rc}
		r.Body = body
		next.ServeHTTP(w, r)
		if !body.done {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// deadlineBody lifts its connection's read deadline when it reaches its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// Listen listens on addr (TCP) and accepts at most maxConns connections at a
// time; the next ones wait in the kernel's backlog until one closes, so the
// process never runs out of file descriptors (then even /healthz would fail).
func Listen(addr string, maxConns int) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, maxConns), nil
}

// DefaultMaxConnections is the default bound of Listen: the process's soft
// limit of open files minus 256 (database connections, spill files, logs), at
// least 16 and at most 10,000; 1,000 when the limit cannot be read.
func DefaultMaxConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1000
	}
	if lim.Cur > 10000+256 {
		return 10000
	}
	return max(int(lim.Cur)-256, 16)
}
