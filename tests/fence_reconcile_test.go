package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// forgedInsertFence is the well-formed fence message of an insert of key
// (a SQL expression) into app.t (poisonSetup), with the given version and
// ordinal (SQL expressions) and the fence id f.fence_id of the recorded fence f
// that where (a SQL condition on f) selects: the message agrees with its row
// event on everything the worker's pairing compares (registration kind,
// relation identity, operation, key, table), so only materialization, which
// holds the message against the recorded fence, can tell the forgery.
func forgedInsertFence(key, version, ordinal, where string) string {
	return fmt.Sprintf(`SELECT pg_logical_emit_message(true, 'synchro.fence', jsonb_build_object(
			'registration_kind', 'synced', 'relation_id', r.relation_id,
			'relation', jsonb_build_object('schema', 'app', 'name', 't', 'oid', r.relation_oid::bigint),
			'op', 'insert', 'version', %s, 'fence_id', f.fence_id, 'ordinal', %s,
			'new_key', to_jsonb(%s::text), 'table_id', st.table_id)::text)
		FROM synchro.fence f, synchro.relation r JOIN synchro.synced_table st USING (relation_id)
		WHERE r.relation_name = 't' AND (%s)`, version, ordinal, key, where)
}

// recordFence records a fence of the current transaction by hand, as the fence
// trigger would (but without its message), with the given relation (a relation
// name of poisonSetup), operation, key and version (SQL expressions).
func recordFence(relation, op, key, version string) string {
	return fmt.Sprintf(`INSERT INTO synchro.fence (fence_id, relation_id, op, key, version, dml_ordinal, xid)
		SELECT gen_random_uuid(), r.relation_id, %s, %s, %s, 1, pg_current_xact_id()
		FROM synchro.relation r WHERE r.relation_name = '%s'`, op, key, version, relation)
}

// fenceCase is a source transaction that the stream must quarantine.
type fenceCase struct {
	name     string
	before   string // committed before the worker starts the stream; "" for none
	prepare  string // DDL committed before the poison transaction
	sibling  string // committed just before the poison transaction; "" for none
	batched  bool   // the sibling, the poison and the later transaction reach the worker in one batch
	poison   string // the poison transaction
	class    string
	sqlstate string
	relation string // registered relation the record names; "" for none
}

// TestFenceReconcileRequiresMatchingRecordedFence: a fence message that carries
// the id of a recorded, not yet materialized fence but disagrees with it (docs/change-stream.md,
// "Write fences and opaque row versions": each pair must match by relation
// identity, operation, keys, transition version and unique fence ID, and the
// worker marks that exact fence materialized) is a blocking failure like an
// unrecorded fence: materialization refuses it (XX001), the transaction is
// quarantined with a redacted record, and nothing after it is materialized.
// The worker's pairing compares the message with the row event only; these
// forgeries agree with the row event, so materialization must catch them.
func TestFenceReconcileRequiresMatchingRecordedFence(t *testing.T) {
	t.Parallel()
	const disable = `ALTER TABLE app.t DISABLE TRIGGER synchro_fence`
	cases := []fenceCase{
		{name: "other_version", prepare: disable,
			// A fence of this transaction, recorded with another version than
			// the message carries (the version rows would get).
			poison: `INSERT INTO app.t VALUES ('SECRET-k1', 'SECRET-123', 'u1');` +
				recordFence("t", "'insert'", "'SECRET-k1'", "'recorded'") + ";" +
				forgedInsertFence("'SECRET-k1'", "'forged'", "1", "f.xid = pg_current_xact_id()")},
		{name: "other_transaction",
			// Fences recorded by the trigger before the stream began: never
			// materialized. The forged message reuses the insert's fence with
			// every field as recorded; only its transaction differs.
			before:  `INSERT INTO app.t VALUES ('SECRET-k2', 'SECRET-123', 'u1'); DELETE FROM app.t WHERE id = 'SECRET-k2'`,
			prepare: disable,
			poison: `INSERT INTO app.t VALUES ('SECRET-k2', 'SECRET-123', 'u1');` +
				forgedInsertFence("'SECRET-k2'", "f.version", "f.dml_ordinal",
					"f.key = 'SECRET-k2' AND f.op = 'insert' AND f.xid <> pg_current_xact_id()")},
		{name: "other_transaction_same_batch", prepare: disable, batched: true,
			// A fence recorded by hand in a transaction of its own (no row
			// event), committed just before and materialized in the same batch.
			sibling: recordFence("t", "'insert'", "'SECRET-k6'", "'v6'"),
			poison: `INSERT INTO app.t VALUES ('SECRET-k6', 'SECRET-123', 'u1');` +
				forgedInsertFence("'SECRET-k6'", "f.version", "1", "f.key = 'SECRET-k6' AND f.xid <> pg_current_xact_id()")},
		{name: "other_key", prepare: disable,
			poison: `INSERT INTO app.t VALUES ('SECRET-k3', 'SECRET-123', 'u1');` +
				recordFence("t", "'insert'", "'SECRET-other'", "'v3'") + ";" +
				forgedInsertFence("'SECRET-k3'", "f.version", "1", "f.xid = pg_current_xact_id()")},
		{name: "other_operation", prepare: disable,
			poison: `INSERT INTO app.t VALUES ('SECRET-k4', 'SECRET-123', 'u1');` +
				recordFence("t", "'update'", "'SECRET-k4'", "'v4'") + ";" +
				forgedInsertFence("'SECRET-k4'", "f.version", "1", "f.xid = pg_current_xact_id()")},
		{name: "other_relation", prepare: disable,
			poison: `INSERT INTO app.t VALUES ('SECRET-k5', 'SECRET-123', 'u1');` +
				recordFence("other", "'insert'", "'SECRET-k5'", "'v5'") + ";" +
				forgedInsertFence("'SECRET-k5'", "f.version", "1", "f.xid = pg_current_xact_id()")},
	}
	for _, tc := range cases {
		tc.class, tc.sqlstate, tc.relation = capture.ClassMaterialize, "XX001", "app.t"
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, bad := requireQuarantined(t, tc)
			// The transaction rolled back whole: the fence its message named
			// is still pending, and no version carries the forged message's.
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f WHERE f.key LIKE 'SECRET-%' AND EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`); n != 0 {
				t.Fatalf("%d fences of the poison transaction's keys were materialized", n)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.row_version WHERE key LIKE 'SECRET-%' OR version = 'forged'`); n != 0 {
				t.Fatalf("%d versions of the poison transaction's rows", n)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, bad.xid); n != 0 {
				t.Fatalf("the poison transaction is in the ledger")
			}
		})
	}
}

// TestFenceReorderedBlocksStream: the fences of one row identity must come in
// the order of its operations (their registered-DML ordinals ascending in
// source order). Fences of one row out of ordinal order are quarantined as
// fence_reordered. The fence trigger refuses a write whose ordinal would be out
// of order (TestFenceRefusesTamperedOrdinal), so only forged messages reach the
// stream so.
func TestFenceReorderedBlocksStream(t *testing.T) {
	t.Parallel()
	tc := fenceCase{name: "forged_messages",
		// The row's insert and update, each with a forged message: the
		// insert's carries ordinal 2, the update's ordinal 1.
		prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_fence`,
		poison: `INSERT INTO app.t VALUES ('SECRET-k1', 'SECRET-123', 'u1');
			UPDATE app.t SET v = 'SECRET-456' WHERE id = 'SECRET-k1';` +
			forgedFence("insert", "2") + ";" + forgedFence("update", "1"),
		class: capture.ClassFenceReordered, relation: "app.t"}
	requireQuarantined(t, tc)
}

// requireQuarantined runs tc against a fresh database and a streaming worker:
// the poison transaction is quarantined with one redacted record of tc's
// class, SQLSTATE and relation that identifies it, the worker stays blocked
// before it, and a later transaction stays unmaterialized. It returns the
// database and the poison transaction.
func requireQuarantined(t *testing.T, tc fenceCase) (*testdb.DB, committed) {
	t.Helper()
	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	wantRel := wantRelation(t, d, tc.relation)
	if tc.before != "" {
		commitTxn(t, d, tc.before)
	}
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	w := startStreaming(t, d, cfg)
	base := commitTxn(t, d, `INSERT INTO app.t VALUES ('base', 'plain', 'u1'); INSERT INTO app.other VALUES (1, 'plain')`)
	waitFor(t, "the first transaction materialized", 30*time.Second, func() (bool, error) {
		return queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, base.xid) == 1, nil
	})
	if tc.prepare != "" {
		d.Exec(t, tc.prepare)
	}
	if tc.batched {
		if err := w.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	if tc.sibling != "" {
		commitTxn(t, d, tc.sibling)
	}
	bad := commitTxn(t, d, tc.poison)
	later := commitTxn(t, d, `INSERT INTO app.other VALUES (2, 'SECRET-123')`)
	if tc.batched {
		cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 2*time.Second, -1, 1000
		startWorker(t, d, cfg)
	}
	waitFor(t, "the poison transaction quarantined or materialized", 30*time.Second, func() (bool, error) {
		var done bool
		err := d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM synchro.poison_txn)
			OR EXISTS (SELECT FROM synchro.txn_ledger WHERE xid = $1)`, bad.xid).Scan(&done)
		return done, err
	})
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 1 {
		t.Fatalf("%d poison records, want 1; the poison transaction was materialized: %v", n,
			rowsOf(t, d, `SELECT commit_lsn::text, event_count, applied_count FROM synchro.txn_ledger WHERE xid = $1`, bad.xid))
	}
	waitBlocked(t, d, cfg.WorkerID, 300*time.Millisecond)
	p := readPoison(t, d, bad)
	if p.class != tc.class || derefS(p.sqlstate) != tc.sqlstate {
		t.Fatalf("poison record %+v: class %q sqlstate %q, want %q %q", p, p.class, derefS(p.sqlstate), tc.class, tc.sqlstate)
	}
	if p.xid != bad.xid || !p.inBounds {
		t.Fatalf("poison record at %s..%s xid %d does not identify the poison transaction (xid %d, WAL %s..%s)",
			p.commitLSN, p.endLSN, p.xid, bad.xid, bad.before, bad.after)
	}
	if (p.relationID == nil) != (wantRel == nil) || (wantRel != nil && *p.relationID != *wantRel) {
		t.Fatalf("relation_id %s, want %s", deref(p.relationID), deref(wantRel))
	}
	if p.attempts != 1 || p.retryRequested || p.resolved {
		t.Fatalf("poison record %+v: want one attempt, no retry, unresolved", p)
	}
	requireBlockedAt(t, d, cfg.Slot, p.commitLSN, later)
	requireRedacted(t, d, log)
	return d, bad
}

// forgedFence is a well-formed fence message of operation op on row
// 'SECRET-k1' of app.t with the given ordinal and a fresh fence id.
func forgedFence(op, ordinal string) string {
	return fmt.Sprintf(`SELECT pg_logical_emit_message(true, 'synchro.fence', jsonb_strip_nulls(jsonb_build_object(
			'registration_kind', 'synced', 'relation_id', r.relation_id,
			'relation', jsonb_build_object('schema', 'app', 'name', 't', 'oid', r.relation_oid::bigint),
			'op', '%[1]s', 'version', md5('%[1]s'), 'fence_id', gen_random_uuid(), 'ordinal', %[2]s,
			'old_key', CASE WHEN '%[1]s' <> 'insert' THEN to_jsonb('SECRET-k1'::text) END,
			'new_key', CASE WHEN '%[1]s' <> 'delete' THEN to_jsonb('SECRET-k1'::text) END, 'table_id', st.table_id))::text)
		FROM synchro.relation r JOIN synchro.synced_table st USING (relation_id)
		WHERE r.relation_name = 't'`, op, ordinal)
}
