package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// poisonListHeader is the header line of `synchroctl poison list`.
var poisonListHeader = []string{"POISON_ID", "COMMIT_LSN", "END_LSN", "XID", "CLASS", "SQLSTATE", "RELATION_ID", "RELATION",
	"ATTEMPTS", "LAST_FAILED_AT", "RETRY_REQUESTED_AT"}

// poisonList runs `synchroctl poison list` and returns its rows, each split into
// fields (no field holds blanks), after checking the header. The output must
// hold no row value.
func poisonList(t *testing.T, ctl string, d *testdb.DB) [][]string {
	t.Helper()
	out := runOK(t, ctl, "poison", "list", "--database-url", d.URL)
	if strings.Contains(out, "SECRET") {
		t.Fatalf("synchroctl poison list shows a row value:\n%s", out)
	}
	t.Logf("synchroctl poison list:\n%s", out)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if got := strings.Fields(lines[0]); !slices.Equal(got, poisonListHeader) {
		t.Fatalf("synchroctl poison list header %v, want %v:\n%s", got, poisonListHeader, out)
	}
	var rows [][]string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != len(poisonListHeader) {
			t.Fatalf("synchroctl poison list line %q has %d fields, want %d:\n%s", l, len(f), len(poisonListHeader), out)
		}
		rows = append(rows, f)
	}
	return rows
}

// requirePoisonListed asserts that `synchroctl poison list` shows exactly one
// record, with the given id, commit and end positions, xid, class, SQLSTATE,
// relation id and relation ("-" where there is none), one attempt and no
// pending retry.
func requirePoisonListed(t *testing.T, ctl string, d *testdb.DB, id int64, commitLSN, endLSN string, xid int64,
	class, sqlstate, relationID, relation string) {
	t.Helper()
	rows := poisonList(t, ctl, d)
	if len(rows) != 1 {
		t.Fatalf("synchroctl poison list shows %d records, want 1: %v", len(rows), rows)
	}
	r := rows[0]
	want := []string{fmt.Sprint(id), commitLSN, endLSN, fmt.Sprint(xid), class, sqlstate, relationID, relation, "1", r[9], "-"}
	if !slices.Equal(r, want) {
		t.Fatalf("synchroctl poison list record %v, want %v", r, want)
	}
	if _, err := time.Parse(time.RFC3339, r[9]); err != nil {
		t.Fatalf("last_failed_at %q: %v", r[9], err)
	}
}

// TestSynchroctlPoisonListAndRetry runs `synchroctl poison list` and
// `synchroctl poison retry` black-box: the list shows a blocking poison
// transaction (id, position, class, relation) and never a row value; a retry
// of an id that names no blocking record fails with a clear error and a
// non-zero exit and changes nothing; after the cause is repaired, a retry
// materializes the same source transaction with the same replay identities,
// resolves the record, and the stream continues.
func TestSynchroctlPoisonListAndRetry(t *testing.T) {
	t.Parallel()
	ctl := filepath.Join(buildCommands(t), "synchroctl")
	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.r VALUES (1, 'fine')`)
	waitMaterialized(t, d)
	if out := runOK(t, ctl, "poison", "list", "--database-url", d.URL); out != "no blocking poison transactions\n" {
		t.Fatalf("synchroctl poison list without poison:\n%s", out)
	}

	// A rule that fails for a row of the transaction: materialize_error 22012.
	bad := commitTxn(t, d, `INSERT INTO app.r VALUES (2, 'boom'); INSERT INTO app.t VALUES ('SECRET-k', 'SECRET-123', 'u1');
		UPDATE app.r SET title = 'fine' WHERE id = 1`)
	later := commitTxn(t, d, `INSERT INTO app.other VALUES (2, 'SECRET-123')`)
	waitPoison(t, d)
	waitBlocked(t, d, cfg.WorkerID, 200*time.Millisecond)
	p := readPoison(t, d, bad)
	if p.class != capture.ClassMaterialize || derefS(p.sqlstate) != "22012" || p.xid != bad.xid || !p.inBounds {
		t.Fatalf("poison record %+v", p)
	}
	requirePoisonListed(t, ctl, d, p.id, p.commitLSN, p.endLSN, bad.xid, capture.ClassMaterialize, "22012",
		fmt.Sprint(relationID(t, d, "app.r")), "app.r")

	// Retrying an id that names no blocking record fails and changes nothing.
	for _, id := range []string{fmt.Sprint(p.id + 1000), "0"} {
		code, stdout, stderr := run(t, ctl, "poison", "retry", "--database-url", d.URL, id)
		if want := "no blocking poison transaction with id " + id; code == 0 || !strings.Contains(stderr, want) || stdout != "" {
			t.Fatalf("synchroctl poison retry %s: exit %d, stdout %q, stderr %q; want a non-zero exit and %q", id, code, stdout, stderr, want)
		}
	}
	if code, _, stderr := run(t, ctl, "poison", "retry", "--database-url", d.URL, "first"); code == 0 || !strings.Contains(stderr, `poison id "first" is not a number`) {
		t.Fatalf("synchroctl poison retry first: exit %d, stderr %q; want a non-zero exit naming the bad id", code, stderr)
	}
	if again := readPoison(t, d, bad); poisonText(again) != poisonText(p) {
		t.Fatalf("a refused retry changed the poison record: %s, was %s", poisonText(again), poisonText(p))
	}
	requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)

	// show, with the id before the flags as docs/operations.md writes it.
	if out := runOK(t, ctl, "poison", "show", fmt.Sprint(p.id), "--database-url", d.URL); !strings.Contains(out, p.commitLSN) ||
		len(strings.Split(strings.TrimRight(out, "\n"), "\n")) != 2 {
		t.Fatalf("synchroctl poison show %d:\n%s\nwant the header and the record at %s", p.id, out, p.commitLSN)
	}

	// Repair the rule and retry through synchroctl (as docs/operations.md writes it).
	d.Exec(t, `UPDATE synchro.synced_table SET scope_rule = jsonb_set(scope_rule, '{membership}', '"SELECT ''all''"') WHERE name = 'r'`)
	out := runOK(t, ctl, "poison", "retry", fmt.Sprint(p.id), "--database-url", d.URL)
	if want := fmt.Sprintf("retry requested for poison %d;", p.id); !strings.HasPrefix(out, want) {
		t.Fatalf("synchroctl poison retry %d:\n%s\nwant it to start with %q", p.id, out, want)
	}
	waitMaterialized(t, d)
	requireRetried(t, d, p, bad, 3)
	ledgerOf(t, d, later)
	waitState(t, d, cfg.WorkerID, "streaming")
	if out := runOK(t, ctl, "poison", "list", "--database-url", d.URL); out != "no blocking poison transactions\n" {
		t.Fatalf("synchroctl poison list after the retry:\n%s", out)
	}
	// The resolved record can no longer be retried.
	if code, _, stderr := run(t, ctl, "poison", "retry", "--database-url", d.URL, fmt.Sprint(p.id)); code == 0 ||
		!strings.Contains(stderr, fmt.Sprintf("no blocking poison transaction with id %d", p.id)) {
		t.Fatalf("synchroctl poison retry of the resolved record: exit %d, stderr %q", code, stderr)
	}

	// A poison that names its relation: a write that bypassed the fence trigger.
	d.Exec(t, `ALTER TABLE app.t DISABLE TRIGGER synchro_fence`)
	bypass := commitTxn(t, d, `INSERT INTO app.t VALUES ('SECRET-k2', 'SECRET-123', 'u1')`)
	later = commitTxn(t, d, `INSERT INTO app.other VALUES (3, 'SECRET-123')`)
	waitFor(t, "a second poison record", 30*time.Second, func() (bool, error) {
		return queryInt(t, d, `SELECT count(*) FROM synchro.poison`) == 1, nil
	})
	waitBlocked(t, d, cfg.WorkerID, 200*time.Millisecond)
	var id int64
	var commit, end string
	if err := d.Pool.QueryRow(context.Background(), `SELECT poison_id, commit_lsn::text, end_lsn::text FROM synchro.poison
		WHERE xid = $1 AND commit_lsn > $2::pg_lsn AND end_lsn <= $3::pg_lsn`, bypass.xid, bypass.before, bypass.after).Scan(&id, &commit, &end); err != nil {
		t.Fatalf("the poison record of the bypassing transaction: %v", err)
	}
	rel := relationID(t, d, "app.t")
	requirePoisonListed(t, ctl, d, id, commit, end, bypass.xid, capture.ClassFenceUnmatched, "-", fmt.Sprint(rel), "app.t")
	requireBlockedAt(t, d, cfg.Slot, commit, later)
	requireRedacted(t, d, log)
}
