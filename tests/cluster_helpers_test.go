package tests

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pgcluster runs scripts/pgcluster.sh with args (PGCLUSTER_FAST=1, as
// scripts/with-cluster.sh runs it) and returns its standard output.
func pgcluster(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("../scripts/pgcluster.sh", args...)
	cmd.Env = append(os.Environ(), "PGCLUSTER_FAST=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/pgcluster.sh %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// ownCluster starts a throwaway PostgreSQL cluster for this test alone (for
// server-wide settings the shared test cluster's parallel tests must not see)
// and returns its URL; the cluster is stopped and removed when the test ends.
func ownCluster(t *testing.T) string {
	t.Helper()
	url, _, _ := ownClusterAt(t)
	return url
}

// ownClusterAt is ownCluster, also returning the cluster's data directory and
// port (to crash and start it again: restartCluster).
func ownClusterAt(t *testing.T) (url, data, port string) {
	t.Helper()
	// A directory the unprivileged server user can traverse (t.TempDir is 0700).
	dir, err := os.MkdirTemp("", "synchro-own-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data = filepath.Join(dir, "data")
	t.Cleanup(func() {
		if _, err := pgcluster(t, "stop", data); err != nil {
			t.Error(err)
		}
		_ = os.RemoveAll(dir)
	})
	// A port below the ephemeral range, free a moment ago; another listener may
	// take it first, so a failed start tries another.
	var lastErr error
	for range 5 {
		port = strconv.Itoa(20000 + rand.IntN(12000))
		ln, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			lastErr = err
			continue
		}
		_ = ln.Close()
		url, err := pgcluster(t, "start", data, port)
		if err == nil {
			return url, data, port
		}
		lastErr = err
	}
	t.Fatalf("could not start a cluster of this test's own: %v", lastErr)
	return "", "", ""
}

// restartCluster crashes the cluster of data (an immediate stop: no shutdown
// checkpoint, as a power loss) and starts it again on port.
func restartCluster(t testing.TB, data, port string) {
	t.Helper()
	if _, err := pgcluster(t, "crash", data); err != nil {
		t.Fatal(err)
	}
	if _, err := pgcluster(t, "start", data, port); err != nil {
		t.Fatal(err)
	}
}
