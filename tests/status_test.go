package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
)

func TestSynchroctlStatus(t *testing.T) {
	t.Parallel()
	ctl := filepath.Join(buildCommands(t), "synchroctl")
	d := testdb.New(t)
	sharedDocs(t, d)
	d.Exec(t, `SELECT synchro.configure_readiness('10 seconds', 1073741824, '60 seconds', current_database())`)
	startStreaming(t, d, workerConfig(d, "status-w"))
	d.Exec(t, `INSERT INTO app.docs VALUES (1, 'a')`)
	waitMaterialized(t, d)

	var out string
	waitFor(t, "status READY: yes", 30*time.Second, func() (bool, error) {
		code, stdout, stderr := run(t, ctl, "status", "--database-url", d.URL)
		out = stdout
		return code == 0 && strings.HasPrefix(out, "READY: yes"), statusExit(code, out, stderr)
	})
	for _, want := range []string{"CHECK", "worker_database", "STREAM", "generation_start", "acknowledged",
		"WORKER", "status-w", "streaming", "POISON: 0 blocking"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^capture_history_pruned +none$`).MatchString(out) {
		t.Fatalf("status output does not say no capture history was pruned:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^horizon +none \(nothing pruned\)$`).MatchString(out) {
		t.Fatalf("status output does not say no pull history was pruned:\n%s", out)
	}
	waitAcknowledged(t, d)
	if _, e := prune(t, d, "0", 100); e != 1 {
		t.Fatalf("pruned %d events, want 1", e)
	}
	out = runOK(t, ctl, "status", "--database-url", d.URL)
	if !regexp.MustCompile(`(?m)^capture_history_pruned +through commit [0-9A-F]+/[0-9A-F]+$`).MatchString(out) {
		t.Fatalf("status output does not show the pruned capture history:\n%s", out)
	}

	// Pruning the pull history: status shows the horizon, when it moved and
	// what the round removed (an insert and an update of one row: two effects,
	// the superseded version and digest).
	d.Exec(t, `UPDATE app.docs SET v = 'a2' WHERE id = 1`)
	waitMaterialized(t, d)
	var round struct {
		horizon                           string
		effects, versions, edges, digests int64
	}
	if err := d.Pool.QueryRow(context.Background(),
		`SELECT horizon::text, effects, versions, edges, digests FROM synchro.prune_history('0', 1000, now())`).
		Scan(&round.horizon, &round.effects, &round.versions, &round.edges, &round.digests); err != nil {
		t.Fatal(err)
	}
	if round.effects != 2 || round.versions != 1 || round.digests != 1 {
		t.Fatalf("prune_history removed %+v; want 2 effects, 1 version, 1 digest", round)
	}
	out = runOK(t, ctl, "status", "--database-url", d.URL)
	for _, want := range []string{
		`(?m)^HISTORY +VALUE$`,
		`(?m)^horizon +commit ` + regexp.QuoteMeta(round.horizon) + `, materialized \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d[.\dhmµs]* ago\)$`,
		`(?m)^advanced_at +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`,
		`(?m)^last_round +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, took \d[.\dhmµs]*$`,
		fmt.Sprintf(`(?m)^last_round_removed +effects 2, row versions 1, membership edges %d, scope digests 1$`, round.edges),
		// Storage of every table of schema synchro, largest first, with readable sizes.
		`(?m)^TABLE +ROWS_ESTIMATE +TABLE_SIZE +INDEX_SIZE +TOTAL_SIZE$`,
		`(?m)^txn_ledger +\d+ +\d+(\.\d)? [KMG]?i?B +\d+(\.\d)? [KMG]?i?B +\d+(\.\d)? [KMG]?i?B$`,
		`(?m)^STORAGE: \d+ tables of schema synchro, \d+(\.\d)? [KMG]?i?B in all$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("status output does not match %s:\n%s", want, out)
		}
	}
	t.Logf("synchroctl status after pruning:\n%s", out)

	var report struct {
		Ready     bool `json:"ready"`
		Readiness []struct {
			Check string `json:"check"`
			Ok    bool   `json:"ok"`
		} `json:"readiness"`
		Stream *struct {
			SlotName string `json:"slot_name"`
		} `json:"stream"`
		History *struct {
			Horizon       string  `json:"horizon"`
			AgeSeconds    float64 `json:"horizon_age_seconds"`
			AdvancedAt    string  `json:"advanced_at"`
			RoundSeconds  float64 `json:"round_seconds"`
			RoundEffects  int64   `json:"round_effects"`
			RoundVersions int64   `json:"round_versions"`
			RoundEdges    int64   `json:"round_edges"`
			RoundDigests  int64   `json:"round_digests"`
		} `json:"history"`
		Storage []struct {
			Table      string `json:"table_name"`
			Rows       int64  `json:"rows_estimate"`
			TotalBytes int64  `json:"total_bytes"`
		} `json:"storage"`
	}
	statusJSON := []byte(runOK(t, ctl, "status", "--json", "--database-url", d.URL))
	if err := json.Unmarshal(statusJSON, &report); err != nil {
		t.Fatal(err)
	}
	if !report.Ready || len(report.Readiness) < 10 || report.Stream == nil || report.Stream.SlotName == "" {
		t.Fatalf("json status: %+v", report)
	}
	if h := report.History; h == nil || h.Horizon != round.horizon || h.AgeSeconds < 0 || h.AdvancedAt == "" || h.RoundSeconds < 0 ||
		h.RoundEffects != round.effects || h.RoundVersions != round.versions || h.RoundEdges != round.edges || h.RoundDigests != round.digests {
		t.Fatalf("json status: history %+v, want the round %+v", h, round)
	}
	// Every table of schema synchro, largest first.
	tables := map[string]bool{}
	for i, s := range report.Storage {
		tables[s.Table] = true
		if s.Rows < 0 || s.TotalBytes < 0 || i > 0 && s.TotalBytes > report.Storage[i-1].TotalBytes {
			t.Fatalf("json status: storage row %d %+v (after %+v)", i, s, report.Storage[max(i-1, 0)])
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM pg_tables WHERE schemaname = 'synchro'`); int64(len(tables)) != n ||
		!tables["effect"] || !tables["history_horizon"] || !tables["txn_ledger"] {
		t.Fatalf("json status: storage of %v, want the %d tables of schema synchro", tables, n)
	}
	// Empty lists are empty arrays, not null, for scripts that iterate them.
	var lists map[string]json.RawMessage
	if err := json.Unmarshal(statusJSON, &lists); err != nil {
		t.Fatal(err)
	}
	if got := string(lists["poison"]); got != "[]" {
		t.Fatalf("json status: poison is %s, want []", got)
	}

	// A DBA gives an operator a login role that is a member of synchro_operator
	// and nothing else: status, poison list and registry list work for it as for
	// the schema owner (operator functions are granted to synchro_operator).
	operator := loginAs(t, d, "synchro_operator")
	code, out, stderr := run(t, ctl, "status", "--database-url", operator)
	if code != 0 {
		t.Fatalf("synchroctl status as an operator exited %d:\n%s", code, stderr)
	}
	for _, want := range []string{"READY: yes", "generation_start", "acknowledged", "horizon", "commit " + round.horizon,
		"last_round_removed", "txn_ledger", "STORAGE: ", "status-w", "streaming", "POISON: 0 blocking"} {
		if !strings.Contains(out, want) {
			t.Fatalf("synchroctl status as an operator lacks %q:\n%s", want, out)
		}
	}
	if out := runOK(t, ctl, "poison", "list", "--database-url", operator); out != "no blocking poison transactions\n" {
		t.Fatalf("synchroctl poison list as an operator:\n%s", out)
	}
	out = runOK(t, ctl, "registry", "list", "--database-url", operator)
	if lines := strings.Split(strings.TrimRight(out, "\n"), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "app.docs") {
		t.Fatalf("synchroctl registry list as an operator:\n%s", out)
	}

	// A poison transaction makes it not ready and is counted; the exit status
	// (3) says not ready, for scripts, with the JSON report as with the table.
	d.Exec(t, `ALTER TABLE app.docs DISABLE TRIGGER synchro_fence; INSERT INTO app.docs VALUES (2, 'b')`)
	waitFor(t, "status shows the poison", 30*time.Second, func() (bool, error) {
		code, out, stderr = run(t, ctl, "status", "--database-url", d.URL)
		return strings.Contains(out, "POISON: 1 blocking"), statusExit(code, out, stderr)
	})
	if !strings.HasPrefix(out, "READY: NO") || code != 3 || !strings.Contains(stderr, "not ready: ") {
		t.Fatalf("status with poison exited %d, stderr %q:\n%s", code, stderr, out)
	}
	t.Logf("synchroctl status:\n%s", out)
	code, out, stderr = run(t, ctl, "status", "--json", "--database-url", d.URL)
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 3 || report.Ready {
		t.Fatalf("json status with poison exited %d (%v), stderr %q:\n%s", code, err, stderr, out)
	}
}

// statusExit fails on an exit status of synchroctl status other than 0 (ready)
// and 3 (not ready), and on one that disagrees with the report it printed.
func statusExit(code int, out, stderr string) error {
	switch {
	case code == 0 && strings.HasPrefix(out, "READY: yes"), code == 3 && strings.HasPrefix(out, "READY: NO"):
		return nil
	default:
		return fmt.Errorf("synchroctl status exited %d with stdout %q, stderr %q", code, out, stderr)
	}
}
