package tests

import (
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
	if !regexp.MustCompile(`(?m)^history_pruned +none$`).MatchString(out) {
		t.Fatalf("status output does not say no history was pruned:\n%s", out)
	}
	waitAcknowledged(t, d)
	if _, e := prune(t, d, "0", 100); e != 1 {
		t.Fatalf("pruned %d events, want 1", e)
	}
	out = runOK(t, ctl, "status", "--database-url", d.URL)
	if !regexp.MustCompile(`(?m)^history_pruned +through commit [0-9A-F]+/[0-9A-F]+$`).MatchString(out) {
		t.Fatalf("status output does not show the pruned history:\n%s", out)
	}

	var report struct {
		Ready     bool `json:"ready"`
		Readiness []struct {
			Check string `json:"check"`
			Ok    bool   `json:"ok"`
		} `json:"readiness"`
		Stream *struct {
			SlotName string `json:"slot_name"`
		} `json:"stream"`
	}
	statusJSON := []byte(runOK(t, ctl, "status", "--json", "--database-url", d.URL))
	if err := json.Unmarshal(statusJSON, &report); err != nil {
		t.Fatal(err)
	}
	if !report.Ready || len(report.Readiness) < 10 || report.Stream == nil || report.Stream.SlotName == "" {
		t.Fatalf("json status: %+v", report)
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
	for _, want := range []string{"READY: yes", "generation_start", "acknowledged", "status-w", "streaming", "POISON: 0 blocking"} {
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
