package tests

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestOperatorCommands: the operator commands the README prints paste as they
// are. make token USER=u1 prints a token for u1 signed with the development
// secret; make status runs synchroctl status (exit 3 through make when not
// ready); every binary logs JSON lines with readable durations; make run
// refuses a taken listen address with that error, before migrating or
// starting anything, and never says it is ready.
func TestOperatorCommands(t *testing.T) {
	t.Run("make token", func(t *testing.T) {
		code, stdout, stderr := run(t, "make", "-s", "-C", "..", "token", "USER=u1", env("SYNCHRO_JWT_HS256_SECRET="+testJWTSecret))
		if code != 0 {
			t.Fatalf("make token: exit %d, stderr %q", code, stderr)
		}
		authn, err := auth.New(auth.Config{Mode: auth.ModeJWT, HS256Secret: testJWTSecret})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(stdout))
		if user, err := authn.User(req); err != nil || user != "u1" {
			t.Fatalf("make token printed %q: user %q, %v; want a token of u1", stdout, user, err)
		}
	})

	t.Run("make status", func(t *testing.T) {
		d := testdb.New(t) // migrated, no worker: not ready
		code, stdout, stderr := run(t, "make", "-s", "-C", "..", "status", env("SYNCHRO_DATABASE_URL="+d.URL))
		if code == 0 || !strings.Contains(stdout, "READY: NO") || !strings.Contains(stdout, "CHECK") {
			t.Fatalf("make status: exit %d, stdout %q, stderr %q; want synchroctl status's report, not ready", code, stdout, stderr)
		}
	})

	t.Run("logs are JSON with readable durations", func(t *testing.T) {
		bin := buildCommands(t)
		d := testdb.Empty(t)
		_, _, stderr := run(t, bin+"/synchroctl", "migrate", "--database-url", d.URL)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if len(lines) < 2 {
			t.Fatalf("synchroctl migrate logged %q; want a line per migration", stderr)
		}
		for _, line := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q is not JSON: %v", line, err)
			}
			if v, ok := rec["duration"]; ok {
				if s, isString := v.(string); !isString || !strings.HasSuffix(s, "s") {
					t.Fatalf("log line %q: duration %v; want a readable string such as \"1.2ms\"", line, v)
				}
			}
		}
	})

	t.Run("make run refuses a taken address", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addr := ln.Addr().String()
		// An unreachable database: anything past the address check would fail on it instead.
		code, stdout, stderr := run(t, "../scripts/run.sh", env("SYNCHRO_LISTEN="+addr, "SYNCHRO_DATABASE_URL=postgres://127.0.0.1:1/none",
			"SYNCHRO_AUTH_MODE=jwt", "SYNCHRO_JWT_HS256_SECRET="+testJWTSecret))
		if code == 0 || !strings.Contains(stderr, addr+" is already in use") || strings.Contains(stderr+stdout, "run: ready") {
			t.Fatalf("run.sh with %s taken: exit %d, stdout %q, stderr %q; want the address refused, no ready line", addr, code, stdout, stderr)
		}
	})
}
