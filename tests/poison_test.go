package tests

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// secret marks row values a poison record and the worker log must never hold.
const secret = "SECRET-123"

const poisonSetup = `CREATE SCHEMA app; CREATE SCHEMA other;
	CREATE TABLE app.t (id text PRIMARY KEY, v text, owner text);
	CREATE TABLE app.other (id int PRIMARY KEY, v text);
	SELECT synchro.register_table('app.t', '{"kind":"column","template":"user:{owner}"}');
	SELECT synchro.register_table('app.other', '{"kind":"shared","scope":"all"}');
	-- sql rules that fail for some rows: division by zero, and a cast whose
	-- error message quotes the row value.
	CREATE TABLE app.r (id int PRIMARY KEY, title text);
	SELECT synchro.register_table('app.r', '{"kind":"sql","membership":"SELECT CASE WHEN $1->>''title'' = ''boom'' THEN (1/(($1->>''id'')::int * 0))::text ELSE ''all'' END"}');
	CREATE TABLE app.c (id int PRIMARY KEY, n text);
	SELECT synchro.register_table('app.c', '{"kind":"sql","membership":"SELECT ''n:'' || ($1->>''n'')::int"}')`

// poisonRecord is a poison_txn row.
type poisonRecord struct {
	id                                 int64
	commitLSN, endLSN, class           string
	xid                                int64
	sqlstate                           *string
	relationID                         *int64
	attempts                           int
	retryRequested, resolved, inBounds bool
}

// requireRetried asserts that the poisoned transaction bad was materialized
// under the identity of its poison record p, with its events all applied
// and reconciled with its own fences, and that the record is resolved. It
// returns the transaction's commit position.
func requireRetried(t *testing.T, d *testdb.DB, p poisonRecord, bad committed, events int) string {
	t.Helper()
	commitLSN, endLSN, n, applied := ledgerOf(t, d, bad)
	if commitLSN != p.commitLSN || endLSN != p.endLSN || n != events || applied != events {
		t.Fatalf("retried transaction materialized at %s..%s with %d/%d events, want the poison's identity %s..%s with %d/%d",
			commitLSN, endLSN, n, applied, p.commitLSN, p.endLSN, events, events)
	}
	if got := rowsOf(t, d, `SELECT fence_id::text FROM synchro.event_ledger WHERE commit_lsn = $1::pg_lsn ORDER BY event_ordinal`,
		commitLSN); !slices.Equal(got, bad.fences) {
		t.Fatalf("event ledger fences %v, want the poisoned transaction's fences %v", got, bad.fences)
	}
	if !queryBool(t, d, `SELECT resolved_at IS NOT NULL FROM synchro.poison_txn WHERE poison_id = $1`, p.id) {
		t.Fatalf("poison record not resolved")
	}
	return commitLSN
}

func readPoison(t *testing.T, d *testdb.DB, c committed) poisonRecord {
	t.Helper()
	var p poisonRecord
	err := d.Pool.QueryRow(context.Background(), `
		SELECT poison_id, commit_lsn::text, end_lsn::text, failure_class, xid, sqlstate, relation_id, attempts,
		       retry_requested_at IS NOT NULL, resolved_at IS NOT NULL,
		       commit_lsn > $1::pg_lsn AND commit_lsn < end_lsn AND end_lsn <= $2::pg_lsn
		FROM synchro.poison_txn`, c.before, c.after).
		Scan(&p.id, &p.commitLSN, &p.endLSN, &p.class, &p.xid, &p.sqlstate, &p.relationID, &p.attempts,
			&p.retryRequested, &p.resolved, &p.inBounds)
	if err != nil {
		t.Fatalf("read the poison record: %v", err)
	}
	return p
}

func waitPoison(t *testing.T, d *testdb.DB) {
	t.Helper()
	waitFor(t, "a poison record", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM synchro.poison_txn)`).Scan(&ok)
		return ok, err
	})
}

// requireBlockedAt asserts that the stream stopped before the poison at
// commitLSN: nothing at or after it is materialized, processed or acknowledged,
// and the later transaction's fences stay pending.
func requireBlockedAt(t *testing.T, d *testdb.DB, slot, commitLSN string, later committed) {
	t.Helper()
	var ok bool
	var state string
	err := d.Pool.QueryRow(context.Background(), `
		SELECT coalesce(p.materialized_commit_lsn < $1::pg_lsn, true)
		       AND coalesce(p.materialized_end_lsn <= $1::pg_lsn, true)
		       AND p.processed_end_lsn <= $1::pg_lsn
		       AND coalesce(p.acknowledged_end_lsn, p.generation_start_lsn) <= $1::pg_lsn
		       AND s.confirmed_flush_lsn <= $1::pg_lsn,
		       p::text || ' slot ' || s.confirmed_flush_lsn
		FROM synchro.progress p JOIN pg_replication_slots s ON s.slot_name = $2`, commitLSN, slot).Scan(&ok, &state)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("progress passed the poison at %s: %s", commitLSN, state)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE commit_lsn >= $1::pg_lsn`, commitLSN); n != 0 {
		t.Fatalf("%d transactions at or after the poison materialized", n)
	}
	if len(later.fences) == 0 {
		t.Fatalf("the later transaction made no fence")
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f WHERE f.fence_id = ANY ($1::uuid[]) AND NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`,
		later.fences); n != int64(len(later.fences)) {
		t.Fatalf("the later transaction was materialized past the poison")
	}
}

// requireRedacted asserts that neither the poison record, nor the operator
// view, nor the worker log holds a row value.
func requireRedacted(t *testing.T, d *testdb.DB, log *lockedBuffer) {
	t.Helper()
	for _, q := range []string{`SELECT coalesce(string_agg(p::text, ' '), '') FROM synchro.poison_txn p`,
		`SELECT coalesce(string_agg(p::text, ' '), '') FROM synchro.poison p`} {
		if rec := queryText(t, d, q); strings.Contains(rec, "SECRET") {
			t.Fatalf("poison record holds a row value: %s", rec)
		}
	}
	if strings.Contains(log.String(), "SECRET") {
		t.Fatalf("worker log holds a row value:\n%s", log)
	}
}

// TestPoisonBlocksStream covers each class of blocking failure: the stream stops
// before the failing source transaction with one redacted poison record naming
// its position, class and relation, and later transactions stay unmaterialized.
func TestPoisonBlocksStream(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		prepare  string // DDL committed before the poison transaction
		poison   string // the poison transaction
		class    string
		relation string // registered relation (schema.name at registration) the record names; "" for none
		sqlstate string
	}{
		{name: "truncate", class: capture.ClassTruncate, relation: "app.t",
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_truncate_guard`,
			poison:  `INSERT INTO app.t VALUES ('SECRET-k1', 'SECRET-123', 'u1'); TRUNCATE app.t`},
		{name: "fence_trigger_disabled", class: capture.ClassFenceUnmatched, relation: "app.t",
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_fence`,
			poison:  `INSERT INTO app.t VALUES ('SECRET-k2', 'SECRET-123', 'u1')`},
		{name: "fence_tampered", class: capture.ClassFenceMalformed,
			poison: `INSERT INTO app.t VALUES ('SECRET-k3', 'SECRET-123', 'u1');
				SELECT pg_logical_emit_message(true, 'synchro.fence', '{"bad":1}')`},
		{name: "fence_forged_duplicate", class: capture.ClassFenceDuplicate, relation: "app.t",
			// Re-emits the message of the fence just written: same fence id twice.
			poison: `INSERT INTO app.t VALUES ('SECRET-k4', 'SECRET-123', 'u1');
				SELECT pg_logical_emit_message(true, 'synchro.fence', jsonb_build_object(
					'registration_kind', 'synced', 'relation_id', f.relation_id,
					'relation', jsonb_build_object('schema', 'app', 'name', 't', 'oid', 'app.t'::regclass::oid::bigint),
					'op', f.op, 'version', f.version, 'fence_id', f.fence_id, 'ordinal', f.dml_ordinal,
					'new_key', to_jsonb(f.key), 'table_id', (SELECT table_id FROM synchro.synced_table WHERE name = 't'))::text)
				FROM synchro.fence f WHERE f.xid = pg_current_xact_id()`},
		{name: "fence_forged_mismatch", class: capture.ClassFenceMismatch, relation: "app.t",
			// A well-formed fence of another operation stands in for the bypassed trigger.
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_fence`,
			poison: `INSERT INTO app.t VALUES ('SECRET-k10', 'SECRET-123', 'u1');
				SELECT pg_logical_emit_message(true, 'synchro.fence', jsonb_build_object(
					'registration_kind', 'synced', 'relation_id', r.relation_id,
					'relation', jsonb_build_object('schema', 'app', 'name', 't', 'oid', r.relation_oid::bigint),
					'op', 'update', 'version', 'forged', 'fence_id', gen_random_uuid(), 'ordinal', 1,
					'old_key', to_jsonb('SECRET-k10'::text), 'new_key', to_jsonb('SECRET-k10'::text), 'table_id', st.table_id)::text)
				FROM synchro.relation r JOIN synchro.synced_table st USING (relation_id) WHERE r.relation_name = 't'`},
		{name: "registry_generation_forged", class: capture.ClassRegistry,
			poison: `INSERT INTO app.t VALUES ('SECRET-k11', 'SECRET-123', 'u1');
				SELECT pg_logical_emit_message(true, 'synchro.registry', '{"generation": 999}')`},
		{name: "key_change_with_guards_disabled", class: capture.ClassKeyChange, relation: "app.t",
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_key_guard, DISABLE TRIGGER synchro_fence`,
			poison:  `UPDATE app.t SET id = 'SECRET-k5', v = 'SECRET-123' WHERE id = 'base'`},
		{name: "rename", class: capture.ClassRelationDrift, relation: "app.t",
			prepare: `ALTER TABLE app.t RENAME TO t2`,
			poison:  `INSERT INTO app.t2 VALUES ('SECRET-k6', 'SECRET-123', 'u1')`},
		{name: "schema_move", class: capture.ClassRelationDrift, relation: "app.t",
			prepare: `ALTER TABLE app.t SET SCHEMA other`,
			poison:  `INSERT INTO other.t VALUES ('SECRET-k7', 'SECRET-123', 'u1')`},
		{name: "drop_recreate_republished", class: capture.ClassRelationDrift, relation: "app.t",
			// The recreated table has no triggers; adding it to the publication
			// makes its rows reach the worker under the registered name. One
			// transaction, so that the worker cannot see the dropped relation
			// before the decoded drift (see TestDroppedRegisteredRelationBlocksCapture).
			poison: `DROP TABLE app.t; CREATE TABLE app.t (id text PRIMARY KEY, v text, owner text);
				ALTER PUBLICATION synchro ADD TABLE app.t;
				INSERT INTO app.t VALUES ('SECRET-k8', 'SECRET-123', 'u1')`},
		{name: "replica_identity_full", class: capture.ClassRelationDrift, relation: "app.t",
			prepare: `ALTER TABLE app.t REPLICA IDENTITY FULL`,
			poison:  `UPDATE app.t SET v = 'SECRET-123' WHERE id = 'base'`},
		// The record names the relation whose events make materialization fail:
		// here the third of four relations the transaction changes.
		{name: "rule_division_by_zero", class: capture.ClassMaterialize, sqlstate: "22012", relation: "app.r",
			poison: `INSERT INTO app.t VALUES ('SECRET-k9', 'SECRET-123', 'u1'); INSERT INTO app.other VALUES (3, 'SECRET-123');
				INSERT INTO app.r VALUES (1, 'boom'); INSERT INTO app.c VALUES (1, '7'); INSERT INTO app.t VALUES ('SECRET-k10', 'x', 'u1')`},
		{name: "rule_error_quotes_value", class: capture.ClassMaterialize, sqlstate: "22P02", relation: "app.c",
			poison: `INSERT INTO app.c VALUES (1, 'SECRET-123')`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, poisonSetup)
			wantRel := wantRelation(t, d, tc.relation)
			cfg := workerConfig(d, "w1")
			log := logTo(&cfg)
			startStreaming(t, d, cfg)
			commitTxn(t, d, `INSERT INTO app.t VALUES ('base', 'plain', 'u1'); INSERT INTO app.other VALUES (1, 'plain')`)
			waitMaterialized(t, d)

			if tc.prepare != "" {
				d.Exec(t, tc.prepare)
			}
			bad := commitTxn(t, d, tc.poison)
			later := commitTxn(t, d, `INSERT INTO app.other VALUES (2, 'SECRET-123')`)
			waitPoison(t, d)
			waitBlocked(t, d, cfg.WorkerID, 300*time.Millisecond)

			if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 1 {
				t.Fatalf("%d poison records, want 1", n)
			}
			p := readPoison(t, d, bad)
			if p.class != tc.class {
				t.Fatalf("failure class %q, want %q", p.class, tc.class)
			}
			if p.xid != bad.xid || !p.inBounds {
				t.Fatalf("poison record at %s..%s xid %d does not identify the poison transaction (xid %d, WAL %s..%s)",
					p.commitLSN, p.endLSN, p.xid, bad.xid, bad.before, bad.after)
			}
			if (p.relationID == nil) != (wantRel == nil) || (wantRel != nil && *p.relationID != *wantRel) {
				t.Fatalf("relation_id %v, want %v", deref(p.relationID), deref(wantRel))
			}
			if got := derefS(p.sqlstate); got != tc.sqlstate {
				t.Fatalf("sqlstate %q, want %q", got, tc.sqlstate)
			}
			if p.attempts != 1 || p.retryRequested || p.resolved {
				t.Fatalf("poison record %+v: want one attempt, no retry, unresolved", p)
			}
			if got := rowsOf(t, d, `SELECT poison_id, commit_lsn::text, failure_class FROM synchro.poison`); !slices.Equal(got,
				[]string{fmt.Sprintf("%d|%s|%s", p.id, p.commitLSN, p.class)}) {
				t.Fatalf("synchro.poison view: %v", got)
			}
			requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)
			requireRedacted(t, d, log)
		})
	}
}

func deref(p *int64) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

func derefS(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestPoisonRetryAfterRepair: a retry without repair fails again and stays
// blocked; after the rule is repaired, the retry materializes the same source
// transaction with the same replay identities, resolves the record, and the
// stream continues.
func TestPoisonRetryAfterRepair(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	w := startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.r VALUES (1, 'fine')`)
	waitMaterialized(t, d)

	bad := commitTxn(t, d, `INSERT INTO app.r VALUES (2, 'boom'); INSERT INTO app.t VALUES ('SECRET-k', 'SECRET-123', 'u1');
		UPDATE app.r SET title = 'fine' WHERE id = 1`)
	later := commitTxn(t, d, `INSERT INTO app.other VALUES (2, 'SECRET-123')`)
	waitPoison(t, d)
	waitBlocked(t, d, cfg.WorkerID, 200*time.Millisecond)
	p := readPoison(t, d, bad)
	if p.class != capture.ClassMaterialize || derefS(p.sqlstate) != "22012" || p.xid != bad.xid {
		t.Fatalf("poison record %+v", p)
	}
	requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)

	// A new worker process stays blocked too.
	w.stop(t)
	cfg.WorkerID = "w2"
	log2 := logTo(&cfg)
	startWorker(t, d, cfg)
	waitBlocked(t, d, cfg.WorkerID, 200*time.Millisecond)
	requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)
	if again := readPoison(t, d, bad); again.id != p.id || again.attempts != 1 {
		t.Fatalf("a restarted worker changed the poison record: %+v", again)
	}

	// Retry without repair: the same transaction fails again.
	retryUnrepaired(t, d, cfg.WorkerID, p.id)
	again := readPoison(t, d, bad)
	if again.id != p.id || again.commitLSN != p.commitLSN || again.retryRequested || again.resolved {
		t.Fatalf("after a failed retry: %+v, want the same unresolved record without a pending retry", again)
	}
	requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)

	// Repair the rule and retry.
	d.Exec(t, `UPDATE synchro.synced_table SET scope_rule = jsonb_set(scope_rule, '{membership}', '"SELECT ''all''"') WHERE name = 'r'`)
	if !queryBool(t, d, `SELECT synchro.retry_poison($1)`, p.id) {
		t.Fatalf("retry_poison returned false")
	}
	waitMaterialized(t, d)
	commitLSN := requireRetried(t, d, p, bad, 3)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison`); n != 0 {
		t.Fatalf("synchro.poison still lists %d records", n)
	}
	ledgerOf(t, d, later)
	waitState(t, d, cfg.WorkerID, "streaming")
	// The repaired rule put every row of app.r in scope "all".
	if got := rowsOf(t, d, `SELECT scope, key, op FROM synchro.effect e JOIN synchro.synced_table s USING (table_id)
		WHERE s.name = 'r' AND e.commit_lsn = $1::pg_lsn ORDER BY event_ordinal`, commitLSN); !slices.Equal(got, []string{"all|2|upsert", "all|1|upsert"}) {
		t.Fatalf("effects of the retried transaction on app.r: %v", got)
	}
	requireRedacted(t, d, log)
	requireRedacted(t, d, log2)
	requireEffectVersions(t, d)
	requireDigests(t, d)
	requireProgressOrdering(t, d, cfg.Slot)
}

func queryBool(t *testing.T, d *testdb.DB, sql string, args ...any) bool {
	t.Helper()
	var b bool
	if err := d.Pool.QueryRow(context.Background(), sql, args...).Scan(&b); err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	return b
}

// TestPoisonInBatch: a batch whose third transaction fails materializes and
// acknowledges exactly the two before it and quarantines the third; also when
// batches of two are pipelined (the failing batch starts while the next one is
// received).
func TestPoisonInBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
	}{{"one_batch", 1000}, {"pipelined", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, poisonSetup)
			cfg := workerConfig(d, "w1")
			first := startStreaming(t, d, cfg)
			first.stop(t)
			var txns []committed
			for i := 1; i <= 5; i++ {
				title := "fine"
				if i == 3 {
					title = "boom"
				}
				txns = append(txns, commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.r VALUES (%d, '%s'); INSERT INTO app.other VALUES (%d, 'x')`, i, title, i)))
			}
			cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 2*time.Second, -1, tc.batch
			startWorker(t, d, cfg)
			waitPoison(t, d)
			waitBlocked(t, d, cfg.WorkerID, 200*time.Millisecond)

			p := readPoison(t, d, txns[2])
			if p.class != capture.ClassMaterialize || derefS(p.sqlstate) != "22012" || p.xid != txns[2].xid || !p.inBounds {
				t.Fatalf("poison record %+v, want transaction 3 (xid %d)", p, txns[2].xid)
			}
			_, end2, _, _ := ledgerOf(t, d, txns[1])
			ledgerOf(t, d, txns[0])
			if got := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger`); got != 2 {
				t.Fatalf("%d transactions materialized, want the first 2", got)
			}
			var ack, processed, slot string
			if err := d.Pool.QueryRow(context.Background(), `SELECT p.acknowledged_end_lsn::text, p.processed_end_lsn::text, s.confirmed_flush_lsn::text
					FROM synchro.progress p JOIN pg_replication_slots s ON s.slot_name = $1`, cfg.Slot).Scan(&ack, &processed, &slot); err != nil {
				t.Fatal(err)
			}
			if ack != end2 || processed != end2 || slot != end2 {
				t.Fatalf("acknowledged %s, processed %s, slot %s; want all at the end of transaction 2 (%s)", ack, processed, slot, end2)
			}
			for _, later := range txns[3:] {
				requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)
			}
		})
	}
}

// TestDroppedRegisteredRelationBlocksCapture: a registered relation dropped and
// recreated under its name. The recreated table has no fence triggers and is
// not in the publication, so its writes never reach the stream: no decoded
// transaction can carry the drift. Capture must block all the same rather than
// go on without the relation's writes.
func TestDroppedRegisteredRelationBlocksCapture(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	startStreaming(t, d, cfg)
	commitTxn(t, d, `INSERT INTO app.t VALUES ('base', 'plain', 'u1'); INSERT INTO app.other VALUES (1, 'plain')`)
	waitMaterialized(t, d)

	d.Exec(t, `DROP TABLE app.t; CREATE TABLE app.t (id text PRIMARY KEY, v text, owner text)`)
	invisible := commitTxn(t, d, `INSERT INTO app.t VALUES ('SECRET-k', 'SECRET-123', 'u1')`)
	if len(invisible.fences) != 0 {
		t.Fatalf("the recreated table has fence triggers")
	}
	later := commitTxn(t, d, `INSERT INTO app.other VALUES (2, 'SECRET-123')`)
	requireBlockedByCatalogDrift(t, d, cfg.WorkerID, log, later)
}

// requireBlockedByCatalogDrift asserts that capture blocked before the
// transaction later (a fenced write) without a poison record: drift that no
// decoded transaction shows (synchro.catalog_drift). Nothing from later on is
// materialized, processed or acknowledged, and the log holds no row value.
func requireBlockedByCatalogDrift(t *testing.T, d *testdb.DB, workerID string, log *lockedBuffer, later committed) {
	t.Helper()
	waitBlocked(t, d, workerID, 300*time.Millisecond)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f WHERE f.fence_id = ANY ($1::uuid[]) AND NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`,
		later.fences); n != int64(len(later.fences)) || n == 0 {
		t.Fatalf("capture went on past the drifted registered relation")
	}
	if !queryBool(t, d, `SELECT processed_end_lsn <= $1::pg_lsn AND coalesce(acknowledged_end_lsn, generation_start_lsn) <= $1::pg_lsn
		FROM synchro.progress`, later.before) {
		t.Fatalf("progress passed the later transaction: %s", progressRow(t, d))
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, later.xid); n != 0 {
		t.Fatalf("the later transaction was materialized")
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("%d poison records, want none: no decoded transaction shows this drift", n)
	}
	requireRedacted(t, d, log)
}

// TestRegisteredColumnDriftBlocksStream: a registered column renamed or dropped
// under capture would silently vanish from every later row image and version.
// The decoded relation no longer carries the registered columns: that is relation
// drift, and the stream blocks at the first row event that shows it.
func TestRegisteredColumnDriftBlocksStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ddl string }{
		{"rename_column", `ALTER TABLE app.t RENAME COLUMN v TO w`},
		{"drop_column", `ALTER TABLE app.t DROP COLUMN v`},
	} {
		ddl := tc.ddl
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, poisonSetup)
			rel := relationID(t, d, "app.t")
			cfg := workerConfig(d, "w1")
			startStreaming(t, d, cfg)
			commitTxn(t, d, `INSERT INTO app.t VALUES ('base', 'plain', 'u1')`)
			waitMaterialized(t, d)
			d.Exec(t, ddl)
			bad := commitTxn(t, d, `INSERT INTO app.t (id, owner) VALUES ('SECRET-k', 'u1')`)
			later := commitTxn(t, d, `INSERT INTO app.other VALUES (2, 'x')`)
			waitPoison(t, d)
			p := readPoison(t, d, bad)
			if p.class != capture.ClassRelationDrift || p.relationID == nil || *p.relationID != rel || p.xid != bad.xid {
				t.Fatalf("poison record %+v (relation %s), want relation_drift of relation %d", p, deref(p.relationID), rel)
			}
			requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)
		})
	}
	// Adding a column is no drift: the registered columns are all still there.
	t.Run("add_column", func(t *testing.T) {
		t.Parallel()
		d := testdb.New(t)
		d.Exec(t, poisonSetup)
		startStreaming(t, d, workerConfig(d, "w1"))
		d.Exec(t, `ALTER TABLE app.t ADD COLUMN extra text`)
		commitTxn(t, d, `INSERT INTO app.t VALUES ('k', 'v1', 'u1', 'not registered')`)
		waitMaterialized(t, d)
		if got := queryText(t, d, `SELECT image::text FROM synchro.projection WHERE key = 'k'`); got != `{"v": "v1", "id": "k", "owner": "u1"}` {
			t.Fatalf("projection %s", got)
		}
	})
}

// TestIdleAcknowledgementPastOpenTransaction: an idle acknowledgement may pass
// the start of a transaction that has not committed yet (its commit record comes
// later). After a worker restart at that acknowledgement, the transaction's rows
// written before it are still decoded and materialized when it commits.
func TestIdleAcknowledgementPastOpenTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	w := startStreaming(t, d, cfg)
	ctx := context.Background()
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var written string
	if _, err := conn.Exec(ctx, `BEGIN; INSERT INTO app.docs SELECT i, 'open' FROM generate_series(1, 3) i`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	restartAfterAcknowledgementPast(t, d, w, cfg, written, "the open transaction's rows")
	if _, err := conn.Exec(ctx, `INSERT INTO app.docs VALUES (4, 'open'); COMMIT`); err != nil {
		t.Fatal(err)
	}
	waitMaterialized(t, d)
	if got := rowsOf(t, d, `SELECT key FROM synchro.synced_row ORDER BY key`); !slices.Equal(got, []string{"1", "2", "3", "4"}) {
		t.Fatalf("synced rows %v, want all four rows of the transaction", got)
	}
	if got := rowsOf(t, d, `SELECT event_count, applied_count FROM synchro.txn_ledger`); !slices.Equal(got, []string{"4|4"}) {
		t.Fatalf("ledger %v, want one transaction with 4 events", got)
	}
}

// TestWorkerOverridesSessionTimeouts: timeouts and a default isolation that an
// operator sets for every session of the database (here on the worker's pool)
// do not reach materialization, which waits for locks and takes as long as a
// batch needs: with lock_timeout, a transaction materialized while another
// session held the progress row was quarantined as poison; with
// statement_timeout, a batch longer than it was cancelled and received again,
// for good.
func TestWorkerOverridesSessionTimeouts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, d.URL+"&lock_timeout=100&statement_timeout=100&idle_in_transaction_session_timeout=100"+
		"&default_transaction_isolation=serializable")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	w := startWorkerOn(t, d, pool, workerConfig(d, "w1"))
	waitStream(t, d)
	defer w.stop(t)

	holder, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if _, err := holder.Exec(ctx, `SELECT FROM synchro.progress FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	locked := commitTxn(t, d, `INSERT INTO app.docs VALUES (0, 'waits for the progress row')`)
	waitFor(t, "a materialization waiting on the progress row past lock_timeout", 30*time.Second, func() (bool, error) {
		var poisoned, waiting bool
		err := d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM synchro.poison_txn),
				EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
				        AND query LIKE '%materialize_transaction%' AND clock_timestamp() - query_start > interval '500 ms')`).Scan(&poisoned, &waiting)
		if err == nil && poisoned {
			err = errors.New("the transaction waiting on the lock was quarantined as poison")
		}
		return waiting, err
	})
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitMaterialized(t, d)

	// One source transaction whose materialization takes longer than statement_timeout.
	long := commitTxn(t, d, `INSERT INTO app.docs SELECT i, 'long' FROM generate_series(1, 5000) i`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, locked)
	requireMaterializedOnce(t, d, 5000, long)
}

// TestWorkerWaitsPastLockTimeout: with a lock_timeout set for the database's
// sessions (here on the worker's pool), the worker's statements that write its
// progress and its catalog records wait for the rows another session holds, as
// materialization does: an idle acknowledgement while the progress row was held,
// and recording new storage of a registered table while its registry row was
// held, failed the worker's session after lock_timeout, and again on every retry.
func TestWorkerWaitsPastLockTimeout(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	ctx := context.Background()
	// application_name tells the worker's sessions from the test's.
	pool, err := pgxpool.New(ctx, d.URL+"&lock_timeout=100&application_name=worker_under_test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the worker stops (cleanups run last first)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	startWorkerOn(t, d, pool, cfg)
	waitState(t, d, "w1", "streaming")
	holder, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)

	// Which of the worker's statements meets the held row first depends on
	// timing (recording the processed boundary, or an acknowledgement, for the
	// progress row): any of them waiting past lock_timeout shows the wait.
	for _, c := range []struct{ held, write, waiting string }{
		{`SELECT FROM synchro.progress FOR UPDATE`, `CREATE TABLE app.noise (v text); INSERT INTO app.noise VALUES ('WAL to acknowledge')`, "a write of the progress row"},
		{`SELECT FROM synchro.relation FOR UPDATE`, `VACUUM FULL app.docs`, "recording new storage of app.docs"},
	} {
		if _, err := holder.Exec(ctx, `BEGIN; `+c.held); err != nil {
			t.Fatal(err)
		}
		d.Exec(t, c.write)
		waitFor(t, c.waiting+" waiting past lock_timeout", 30*time.Second, func() (bool, error) {
			var waiting bool
			err := d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
				AND application_name = 'worker_under_test' AND wait_event_type = 'Lock'
				AND clock_timestamp() - query_start > interval '500 ms')`).Scan(&waiting)
			if err == nil && strings.Contains(log.String(), "worker session failed") {
				err = fmt.Errorf("the worker failed its session: %s", regexp.MustCompile(`worker session failed.*`).FindString(log.String()))
			}
			return waiting, err
		})
		if _, err := holder.Exec(ctx, `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
	}
	later := commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'after the waits')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, later)
	if strings.Contains(log.String(), "worker session failed") {
		t.Fatalf("the worker failed its session:\n%s", log.String())
	}
}

// TestLiftTimeouts: synchro.lift_timeouts, which materialization (for its
// session) and pruning (for each of its transactions) run under, turns off the
// timeouts set for the database's application sessions, and transaction_timeout
// too where the server has it. PostgreSQL 15 and 16 have no transaction_timeout
// (and set_config of it would fail there): on them this shows only that the call
// does not fail and leaves the setting absent; on 17 and later it shows the
// setting turned off.
func TestLiftTimeouts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL+"&statement_timeout=100000&lock_timeout=100000&idle_in_transaction_session_timeout=100000")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	set, lifted := "100s 100s 100s absent", "0 0 0 absent"
	if version >= 170000 {
		set, lifted = "100s 100s 100s 100s", "0 0 0 0"
		if _, err := conn.Exec(ctx, `SELECT set_config('transaction_timeout', '100s', false)`); err != nil {
			t.Fatal(err)
		}
	}
	timeouts := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var s string
		if err := q.QueryRow(ctx, `SELECT concat_ws(' ', current_setting('statement_timeout'), current_setting('lock_timeout'),
			current_setting('idle_in_transaction_session_timeout'), coalesce(current_setting('transaction_timeout', true), 'absent'))`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := timeouts(conn); got != set {
		t.Fatalf("timeouts of the session: %q, want %q", got, set)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT synchro.lift_timeouts(true)`); err != nil {
		t.Fatalf("lift_timeouts for the transaction: %v", err)
	}
	if got := timeouts(tx); got != lifted {
		t.Fatalf("timeouts in the transaction after lift_timeouts(true): %q, want %q", got, lifted)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := timeouts(conn); got != set {
		t.Fatalf("timeouts after the transaction: %q, want the session's %q again", got, set)
	}
	if _, err := conn.Exec(ctx, `SELECT synchro.lift_timeouts(false)`); err != nil {
		t.Fatalf("lift_timeouts for the session: %v", err)
	}
	if got := timeouts(conn); got != lifted {
		t.Fatalf("timeouts of the session after lift_timeouts(false): %q, want %q", got, lifted)
	}
}

// TestWorkerPoolLiftsTimeouts: the pool synchrod's worker runs on (wal.NewPool)
// has no statement, lock or idle-in-transaction timeout, whatever the database,
// the role or the URL set: with a statement_timeout of a few milliseconds for
// the database, the worker's statements failed now and then and its session
// retried them.
func TestWorkerPoolLiftsTimeouts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	d.Exec(t, `ALTER DATABASE `+pgx.Identifier{d.Name}.Sanitize()+` SET statement_timeout = '1ms';
		ALTER DATABASE `+pgx.Identifier{d.Name}.Sanitize()+` SET idle_in_transaction_session_timeout = '1ms'`)
	pool, err := wal.NewPool(ctx, d.URL+"&lock_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var got string
	if err := pool.QueryRow(ctx, `SELECT concat_ws(' ', current_setting('statement_timeout'), current_setting('lock_timeout'),
		current_setting('idle_in_transaction_session_timeout'))`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "0 0 0" {
		t.Fatalf("timeouts on the worker's pool: %q, want 0 0 0", got)
	}
}

// TestPoisonBlocksIdleAcknowledgement: while a poison transaction blocks the
// stream, no idle processed boundary can be recorded past it.
func TestPoisonBlocksIdleAcknowledgement(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	startStreaming(t, d, workerConfig(d, "w1")).stop(t)
	before := queryText(t, d, `SELECT processed_end_lsn::text FROM synchro.progress`)
	d.Exec(t, `SELECT synchro.quarantine(pg_current_wal_flush_lsn(), pg_current_wal_flush_lsn(), 1, 'fence_unmatched', NULL, NULL)`)
	requireState(t, d.ExecErr(`SELECT synchro.record_processed(pg_current_wal_flush_lsn(), now())`), "55000", "poison")
	if after := queryText(t, d, `SELECT processed_end_lsn::text FROM synchro.progress`); after != before {
		t.Fatalf("processed boundary moved from %s to %s past a poison", before, after)
	}
}

// TestPoisonRecordedWhileIdleWithholdsAcknowledgement: a poison transaction
// recorded by another session while the worker streams idle (here one whose
// retry is already requested, which does not block a new session) makes the
// worker's idle acknowledgements refused: it acknowledges nothing and keeps
// streaming instead of failing its session.
func TestPoisonRecordedWhileIdleWithholdsAcknowledgement(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	startStreaming(t, d, cfg)
	waitState(t, d, "w1", "streaming")
	d.Exec(t, `SELECT synchro.retry_poison(synchro.quarantine('0/10', '0/20', 1, 'injected', NULL, NULL))`)
	before := queryText(t, d, `SELECT processed_end_lsn::text FROM synchro.progress`)
	d.Exec(t, `CREATE TABLE app.noise (v text); INSERT INTO app.noise VALUES ('WAL to acknowledge')`)
	waitFor(t, "an idle acknowledgement withheld", 30*time.Second, func() (bool, error) {
		return strings.Contains(log.String(), "idle acknowledgement withheld"), nil
	})
	if strings.Contains(log.String(), "worker session failed") {
		t.Fatalf("the refused idle acknowledgement failed the session:\n%s", log.String())
	}
	if after := queryText(t, d, `SELECT processed_end_lsn::text FROM synchro.progress`); after != before {
		t.Fatalf("processed boundary moved from %s to %s past an unresolved poison", before, after)
	}
	waitState(t, d, "w1", "streaming")
}

// retryUnrepaired asks for a retry of a poison record whose cause was not
// repaired and waits until the worker has made its second attempt and is
// blocked again.
func retryUnrepaired(t *testing.T, d *testdb.DB, workerID string, poisonID int64) {
	t.Helper()
	if !queryBool(t, d, `SELECT synchro.retry_poison($1)`, poisonID) {
		t.Fatalf("retry_poison returned false")
	}
	waitFor(t, "second attempt", 30*time.Second, func() (bool, error) {
		var n int
		err := d.Pool.QueryRow(context.Background(), `SELECT attempts FROM synchro.poison_txn WHERE poison_id = $1`, poisonID).Scan(&n)
		return n == 2, err
	})
	waitBlocked(t, d, workerID, 200*time.Millisecond)
}

// TestForgedCaptureMessagesNeedPrivilege: a fence or registry message capture
// cannot match blocks it for good (docs/change-stream.md), and PostgreSQL lets every role emit
// messages, so a role with nothing but CONNECT could block capture with one
// call. Migration revokes pg_logical_emit_message from PUBLIC (the tests
// migrate as a superuser): such a role, and the service and operator roles, get
// 42501; the fence (a definer function) still emits, so writes are captured.
func TestForgedCaptureMessagesNeedPrivilege(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	startStreaming(t, d, workerConfig(d, "w1"))
	if n := queryInt(t, d, `SELECT count(*) FROM pg_proc WHERE proname = 'pg_logical_emit_message'
		AND has_function_privilege('public', oid, 'EXECUTE')`); n != 0 {
		t.Fatalf("%d signatures of pg_logical_emit_message are executable by PUBLIC", n)
	}
	nobody := "nobody_" + strings.ToLower(strings.ReplaceAll(d.Name, "-", "_"))
	d.Exec(t, `CREATE ROLE `+nobody+` NOLOGIN`)
	t.Cleanup(func() {
		if _, err := d.Pool.Exec(context.Background(), `DROP ROLE `+nobody); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	for _, role := range []string{nobody, "synchro_service", "synchro_operator"} {
		for _, msg := range []string{`SELECT pg_logical_emit_message(true, 'synchro.fence', '{"registration_kind":"synced"}')`,
			`SELECT pg_logical_emit_message(true, 'synchro.registry', '{"generation": 99}')`} {
			if err := asRole(t, d, role, msg); sqlState(err) != "42501" {
				t.Fatalf("%s: %q: %v, want 42501", role, msg, err)
			}
		}
	}
	c := commitTxn(t, d, `INSERT INTO app.t VALUES ('k', 'v', 'u1')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, c)
}
