package tests

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/metrics"
)

// TestSynchroctlReset walks the operator's commands over a stream blocked by a
// decoded TRUNCATE: `reset start` runs the phases in the foreground and exits
// 0 once the reset is ready, logging its phases; `reset status` shows it;
// a push accepted meanwhile stays gated while the reset is only ready;
// activation is refused, changing nothing, once the old stream moved or the
// candidate slot is missing; `reset abort` discards the stage and its
// candidate slot and leaves the old stream as it was (blocked by its poison,
// no longer held by a reset; the push still gated); a second
// `reset start --activate` recovers; `reset retire` drops the old slot and the
// old generation's state and says what it removed.
func TestSynchroctlReset(t *testing.T) {
	t.Parallel()
	ctl := filepath.Join(buildCommands(t), "synchroctl")
	e := newSyncEnv(t, "")
	dropResetSlots(t, e)
	e.connect(t, "u1", "c1")
	e.push(t, "u1", "c1", mut("m1", "docs", "insert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "one"}))
	waitMaterialized(t, e.d)
	resetCauses[0].block(t, e)
	resetCauses[0].repair(t, e)
	oldSlot, oldGen := e.cfg.Slot, queryText(t, e.d, `SELECT stream_generation::text FROM synchro.progress`)
	e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d2', 'u1', 'two')`)
	// A push accepted while capture is blocked: the reset's baseline covers it.
	e.push(t, "u1", "c1", mut("m2", "docs", "insert", map[string]any{"id": "p1"}, map[string]any{"owner_id": "u1", "title": "pushed while blocked"}))

	code, out, logs := run(t, ctl, "reset", "start", "--reason", "decoded truncate", "--database-url", e.d.URL)
	if code != 0 || !strings.Contains(out, " is ready") {
		t.Fatalf("reset start exited %d: %s\n%s", code, out, logs)
	}
	for _, want := range []string{"stream reset begun", "candidate slot created", "reset baseline staged", "reset caught up to its barrier", "stream reset ready"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("reset start did not log %q:\n%s", want, logs)
		}
	}
	first := queryText(t, e.d, `SELECT reset_id::text FROM synchro.stream_reset`)
	status := runOK(t, ctl, "reset", "status", "--database-url", e.d.URL)
	if !strings.HasPrefix(status, "RESET_ID") || !strings.Contains(status, first) || !strings.Contains(status, " ready ") {
		t.Fatalf("reset status:\n%s", status)
	}
	// Metrics show the reset in progress.
	m := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: e.d.Pool, Metrics: metrics.New(e.d.Pool)}))
	defer m.Close()
	scraped := scrape(t, m.URL)
	if metricValue(t, scraped, `synchro_reset_phase{phase="ready"}`) != 1 || metricValue(t, scraped, `synchro_reset_phase{phase="staging"}`) != 0 ||
		metricValue(t, scraped, "synchro_reset_rows_staged") != 2 {
		t.Fatalf("metrics of a ready reset that staged 2 rows (d2, p1; d1 was truncated):\n%s", scraped)
	}

	// Coverage of a reset that is not activated never clears the gate.
	requireGated(t, e, "u1", "c1", "reset ready")
	// Activation is refused, changing nothing, when the old stream moved
	// (here in a transaction rolled back) or the candidate slot is missing.
	tx, err := e.d.Pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `UPDATE synchro.progress SET materialized_commit_lsn = generation_start_lsn`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `SELECT synchro.activate_reset($1)`, first); err == nil ||
		!strings.Contains(err.Error(), "the stream moved since reset") {
		t.Fatalf("activation after the old stream moved: %v, want it refused", err)
	}
	_ = tx.Rollback(context.Background())
	candidate := queryText(t, e.d, `SELECT candidate_slot FROM synchro.stream_reset WHERE reset_id = $1`, first)
	e.d.DropSlot(t, candidate)
	if code, _, stderr := run(t, ctl, "reset", "activate", "--database-url", e.d.URL); code == 0 ||
		!strings.Contains(stderr, "replication slot "+candidate+" is missing") {
		t.Fatalf("reset activate without its candidate slot exited %d: %s", code, stderr)
	}
	if got := queryText(t, e.d, `SELECT stream_generation::text || ' ' || slot_name FROM synchro.progress`); got != oldGen+" "+oldSlot {
		t.Fatalf("a refused activation changed the stream: %s", got)
	}
	if got := runOK(t, ctl, "reset", "abort", "--database-url", e.d.URL); !strings.Contains(got, first+" aborted") {
		t.Fatalf("reset abort: %s", got)
	}
	if got := queryText(t, e.d, `SELECT r.phase || ' ' || synchro.slot_state(r.candidate_slot) || ' '
			|| (SELECT count(*) FROM synchro.projection WHERE stream_generation = r.target_generation)
			|| ' ' || (SELECT count(*) FROM synchro.reset_coverage WHERE reset_id = r.reset_id)
		FROM synchro.stream_reset r`); got != "aborted missing 0 0" {
		t.Fatalf("after abort: %s, want aborted, its slot missing, nothing staged or covered", got)
	}
	waitFor(t, "the old stream blocked by its poison again, not held by a reset", 30e9, func() (bool, error) {
		return queryText(t, e.d, `SELECT string_agg("check", ',' ORDER BY "check") FROM synchro.readiness WHERE NOT ok`) == "poison,worker", nil
	})
	requireGated(t, e, "u1", "c1", "reset aborted")

	code, out, logs = run(t, ctl, "reset", "start", "--activate", "--database-url", e.d.URL)
	if code != 0 || !strings.Contains(out, " is activated") {
		t.Fatalf("reset start --activate exited %d: %s\n%s", code, out, logs)
	}
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)
	if err := sqlPull(e, "u1", "c1"); err != nil {
		t.Fatalf("after activation the baseline's coverage clears the gate: %v", err)
	}
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r)
	requireScopeEqualsDocs(t, e, r, "u1")

	retired := runOK(t, ctl, "reset", "retire", "--database-url", e.d.URL)
	if !strings.Contains(retired, "retired; removed: {") {
		t.Fatalf("reset retire: %s", retired)
	}
	var removed map[string]any
	if err := json.Unmarshal([]byte(retired[strings.Index(retired, "{"):]), &removed); err != nil {
		t.Fatalf("reset retire: %s: %v", retired, err)
	}
	if removed["slot"] != oldSlot || removed["projection"].(float64) < 1 {
		t.Fatalf("reset retire removed %v, want the old slot %s and the old projections", removed, oldSlot)
	}
	if got := queryText(t, e.d, `SELECT synchro.slot_state($1)`, oldSlot); got != "missing" {
		t.Fatalf("the old slot is %s after retirement", got)
	}
	for _, table := range []string{"projection", "row_version", "membership", "effect", "scope_digest", "txn_ledger", "event_ledger"} {
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.`+table+` WHERE stream_generation = $1::uuid`, oldGen); n != 0 {
			t.Fatalf("%d rows of the old generation remain in synchro.%s", n, table)
		}
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(runOK(t, ctl, "reset", "status", "--json", "--database-url", e.d.URL)), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0]["phase"] != "retired" || list[1]["phase"] != "aborted" {
		t.Fatalf("reset status --json: %v", list)
	}
	// Serving continues on the new generation after retirement.
	e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d3', 'u1', 'three')`)
	waitMaterialized(t, e.d)
	e.pullAll(t, "u1", "c1", 100, r)
	requireScopeEqualsDocs(t, e, r, "u1")
}
