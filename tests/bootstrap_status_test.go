package tests

// What an operator sees of a projection bootstrap: readiness, synchroctl
// status and registry list, the metric and the coordinator's progress lines.

import (
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/metrics"
	"github.com/synchro-sync/synchro/internal/reset"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestBootstrapSeenByOperators registers a table holding 50,000 rows beside a
// served one: while its bootstrap is pending and while it catches up,
// synchroctl status says ready (exit 0) and names the bootstrap in its reset
// check (with the rows staged once the baseline committed), registry list
// shows the table bootstrapping, synchro_bootstrap_in_progress is 1, and the
// coordinator logs staging progress with rows, rate and ETA; once it is
// retired the table is served and the metric is 0.
func TestBootstrapSeenByOperators(t *testing.T) {
	t.Parallel()
	ctl := filepath.Join(buildCommands(t), "synchroctl")
	d := testdb.New(t)
	sharedDocs(t, d)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	m := metrics.New(d.Pool)
	srv := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: d.Pool, Metrics: m}))
	defer srv.Close()
	cfg := workerConfig(d, "boot-status")
	cfg.Metrics = m
	startStreaming(t, d, cfg)
	d.Exec(t, `INSERT INTO app.docs VALUES (1, 'a')`)
	waitMaterialized(t, d)

	createItems(t, d, 50000)
	d.Exec(t, `ANALYZE app.items; SELECT synchro.register_table('app.items', '{"kind":"column","template":"user:{owner_id}"}')`)

	// status: ready, its reset check naming the bootstrap; the row of items
	// in registry list says bootstrapping; the metric says one is in progress.
	requireSeen := func(when string, want *regexp.Regexp) {
		t.Helper()
		var out string
		waitFor(t, "status READY: yes "+when, 30*time.Second, func() (bool, error) {
			code, stdout, stderr := run(t, ctl, "status", "--database-url", d.URL)
			out = stdout
			return code == 0 && strings.HasPrefix(out, "READY: yes"), statusExit(code, out, stderr)
		})
		if !want.MatchString(out) {
			t.Fatalf("status %s does not match %s:\n%s", when, want, out)
		}
		list := runOK(t, ctl, "registry", "list", "--database-url", d.URL)
		if !regexp.MustCompile(`(?m)^.*app\.items.*bootstrapping.*$`).MatchString(list) {
			t.Fatalf("registry list %s does not show app.items bootstrapping:\n%s", when, list)
		}
		if got := metricValue(t, scrape(t, srv.URL), "synchro_bootstrap_in_progress"); got != 1 {
			t.Fatalf("synchro_bootstrap_in_progress %s: %v, want 1", when, got)
		}
	}
	requireSeen("while the bootstrap is pending", regexp.MustCompile(`(?m)^ *reset +ok +bootstrap [0-9a-f-]+ is staging`))

	logs := &lockedBuffer{}
	bcfg := resetConfig(d, false)
	bcfg.ProgressInterval = time.Millisecond
	bcfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	bcfg.AfterPoint = func(p reset.Point) error {
		if p == reset.PointBaselined {
			requireSeen("after the baseline", regexp.MustCompile(`(?m)^ *reset +ok +bootstrap [0-9a-f-]+ is catching_up \(50000 rows staged\)`))
		}
		return nil
	}
	res, err := reset.Bootstrap(t.Context(), bcfg)
	if err != nil || res.Phase != "retired" {
		t.Fatalf("bootstrap ended %q: %v", res.Phase, err)
	}
	progress := regexp.MustCompile(`msg="bootstrap staging" bootstrap=[0-9a-f-]+ step=\S+ relation=app\.items relation_rows=\d+ rows=\d+ rows_per_second=\d+ eta=\S+`)
	if !progress.MatchString(logs.String()) {
		t.Fatalf("no staging progress line with rows, rate and ETA in the coordinator's log:\n%s", logs)
	}

	list := runOK(t, ctl, "registry", "list", "--database-url", d.URL)
	if !regexp.MustCompile(`(?m)^.*app\.items.*served.*$`).MatchString(list) {
		t.Fatalf("registry list after the bootstrap does not show app.items served:\n%s", list)
	}
	if got := metricValue(t, scrape(t, srv.URL), "synchro_bootstrap_in_progress"); got != 0 {
		t.Fatalf("synchro_bootstrap_in_progress after the bootstrap: %v, want 0", got)
	}
}
