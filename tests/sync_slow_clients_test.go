package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestSyncSlowBodiesAreClosed reproduces issue 28, point 5: requests that
// announce a body (Content-Length) and never send it held their connections
// for good, unauthenticated ones too (the server waited for the unread body
// to reuse the connection), until the process ran out of files and /healthz
// stopped answering. Now, on synchrod's server and listener, with three times
// more such connections than the connection cap: /healthz answers, an
// unauthenticated one is refused 401 and closed at once, an authenticated one
// is answered 408 request_timeout and closed once the body read timeout has
// passed; the server never holds more connections than the cap.
func TestSyncSlowBodiesAreClosed(t *testing.T) {
	const maxConns, slow = 8, 24
	d := testdb.New(t)
	cfg := httpapi.ServerConfig{ReadHeaderTimeout: 5 * time.Second, BodyReadTimeout: time.Second}
	srv := httpapi.NewServer(syncRouter(t, d, 16), cfg)
	capped, err := httpapi.Listen("127.0.0.1:0", maxConns)
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: capped}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	conns := make([]net.Conn, slow)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		authz := ""
		if i%2 == 1 {
			authz = "Authorization: Bearer " + token(t, "u1") + "\r\n"
		}
		if _, err := fmt.Fprintf(c, "POST /sync/push HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", addr, authz); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	r, err := requestWithin(t, 60*time.Second, http.MethodGet, "http://"+addr+"/healthz", "", nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("/healthz beside %d slow bodies: %d %v", slow, r.Status, err)
	}
	for i, c := range conns {
		// Every connection is closed by the server well before this deadline
		// (the slowest waits for slow/maxConns body timeouts in the backlog).
		if err := c.SetReadDeadline(time.Now().Add(60 * time.Second)); err != nil {
			t.Fatal(err)
		}
		answer, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("connection %d was not closed by the server: %v", i, err)
		}
		want := "HTTP/1.1 401 "
		if i%2 == 1 {
			want = "HTTP/1.1 408 "
		}
		if !strings.HasPrefix(string(answer), want) || !strings.Contains(string(answer), "Connection: close") {
			t.Fatalf("connection %d answered %q, want %q and Connection: close", i, answer, want)
		}
	}
	if n := ln.most.Load(); n > maxConns {
		t.Fatalf("the server held %d connections at once, over the cap of %d", n, maxConns)
	}
}

// countingListener counts the connections it accepted that are not closed
// yet, and the most at once; a connection counts off before it closes, so
// before the listener under it may accept the next.
type countingListener struct {
	net.Listener
	open, most atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}
