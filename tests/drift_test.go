package tests

// Drift of registered relations beyond the poison tests' cases: DDL and
// configuration changes of a registered relation, its key, columns, partitions
// and publication (docs/change-stream.md, "Registry activation and relation drift",
// "TRUNCATE and replica identity", "Write fences and opaque row versions",
// "Readiness"). Each case either blocks capture (with one redacted poison
// record at the first transaction that shows it, or from the catalog when no
// decoded transaction can), is refused before it can reach the stream, or is
// harmless and keeps capturing; readiness must agree.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// driftSetup registers, all in the shared scope "all": a text-keyed table with
// a numeric text column n and a unique NOT NULL column alt (a candidate for
// another key), an int-keyed table with a varchar column v and an int column
// q, a bystander table
// app.other, and a partitioned table.
const driftSetup = `CREATE SCHEMA app;
	CREATE TABLE app.t (id text PRIMARY KEY, v text, n text, alt text NOT NULL UNIQUE);
	CREATE TABLE app.k (id int PRIMARY KEY, v varchar(50), q int);
	CREATE TABLE app.other (id int PRIMARY KEY, v text);
	CREATE TABLE app.parts (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id);
	CREATE TABLE app.parts_1 PARTITION OF app.parts FOR VALUES FROM (0) TO (1000);
	SELECT synchro.register_table('app.t', '{"kind":"shared","scope":"all"}');
	SELECT synchro.register_table('app.k', '{"kind":"shared","scope":"all"}');
	SELECT synchro.register_table('app.other', '{"kind":"shared","scope":"all"}');
	SELECT synchro.register_table('app.parts', '{"kind":"shared","scope":"all"}')`

// driftBase is one materialized row in each registered table.
const driftBase = `INSERT INTO app.t VALUES ('base', 'plain', '5', 'a0'); INSERT INTO app.k VALUES (1, 'plain', 5);
	INSERT INTO app.other VALUES (1, 'plain'); INSERT INTO app.parts VALUES (1, 'plain')`

// driftLater is the transaction committed after a drift: a write to a table
// the drift does not touch. Its value must never reach a poison record or log.
const driftLater = `INSERT INTO app.other VALUES (2, 'SECRET-123')`

// driftEnv is a database with driftSetup, a streaming worker that logs into
// log, readiness limits configured, driftBase materialized and readiness ready.
type driftEnv struct {
	d   *testdb.DB
	cfg wal.Config
	log *lockedBuffer
	w   *runningWorker
}

func newDriftEnv(t *testing.T) *driftEnv {
	t.Helper()
	d := testdb.New(t)
	d.Exec(t, driftSetup)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	w := startStreaming(t, d, cfg)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	commitTxn(t, d, driftBase)
	waitMaterialized(t, d)
	waitReadiness(t, d)
	return &driftEnv{d: d, cfg: cfg, log: log, w: w}
}

// failingChecks returns the failing readiness checks in readiness order, and
// each with its reason.
func failingChecks(ctx context.Context, d *testdb.DB) (names, reasons []string, err error) {
	rows, err := d.Pool.Query(ctx, `SELECT "check", reason FROM synchro.readiness WHERE NOT ok`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, reason string
		if err := rows.Scan(&name, &reason); err != nil {
			return nil, nil, err
		}
		names = append(names, name)
		reasons = append(reasons, name+": "+reason)
	}
	return names, reasons, rows.Err()
}

// inReadinessOrder sorts check names by their place in synchro.readiness.
func inReadinessOrder(checks []string) []string {
	out := slices.Clone(checks)
	slices.SortFunc(out, func(a, b string) int { return slices.Index(readinessOrder, a) - slices.Index(readinessOrder, b) })
	return out
}

// waitReadiness waits until synchro.readiness fails exactly the checks given
// (none: ready); when unready, synchro.is_ready() must be false too.
func waitReadiness(t *testing.T, d *testdb.DB, failing ...string) {
	t.Helper()
	want := inReadinessOrder(failing)
	var last []string
	defer func() {
		if t.Failed() {
			t.Logf("last failing readiness checks: %q", last)
		}
	}()
	waitFor(t, fmt.Sprintf("readiness failing exactly %v", want), 30*time.Second, func() (bool, error) {
		names, reasons, err := failingChecks(context.Background(), d)
		last = reasons
		return slices.Equal(inReadinessOrder(names), want), err
	})
	if len(want) > 0 && queryBool(t, d, `SELECT synchro.is_ready()`) {
		t.Fatalf("synchro.is_ready() is true while %v fail", want)
	}
}

// requireBlockedBy asserts that the stream blocked with exactly one redacted
// poison record of class at the transaction bad, naming relation (schema.name;
// "" for none), and that nothing from bad on, later included, materialized.
func (e *driftEnv) requireBlockedBy(t *testing.T, bad, later committed, class, relation string) {
	t.Helper()
	d := e.d
	waitPoison(t, d)
	waitBlocked(t, d, e.cfg.WorkerID, 300*time.Millisecond)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 1 {
		t.Fatalf("%d poison records, want 1", n)
	}
	p := readPoison(t, d, bad)
	want := "NULL"
	if relation != "" {
		want = fmt.Sprint(recordedRelationID(t, d, relation))
	}
	if p.class != class || deref(p.relationID) != want || p.xid != bad.xid || !p.inBounds {
		t.Fatalf("poison record %+v (relation %s), want class %s, relation %s (%s), xid %d within %s..%s",
			p, deref(p.relationID), class, want, relation, bad.xid, bad.before, bad.after)
	}
	requireBlockedAt(t, d, e.cfg.Slot, p.commitLSN, later)
	requireRedacted(t, d, e.log)
}

// recordedRelationID is the relation id registered under a schema-qualified
// name, looked up by the recorded name (the relation may since have been
// renamed, moved or dropped and recreated).
func recordedRelationID(t *testing.T, d *testdb.DB, relation string) int64 {
	t.Helper()
	schema, name, _ := strings.Cut(relation, ".")
	return queryInt(t, d, `SELECT relation_id FROM synchro.relation WHERE schema_name = $1 AND relation_name = $2`, schema, name)
}

// wantRelation is the relation_id a poison record must name for relation
// (schema.name, by its recorded name), or nil for "" (none).
func wantRelation(t *testing.T, d *testdb.DB, relation string) *int64 {
	t.Helper()
	if relation == "" {
		return nil
	}
	id := recordedRelationID(t, d, relation)
	return &id
}

// requireImage asserts the materialized image of a registered row (jsonb
// equality; "" for no row).
func requireImage(t *testing.T, d *testdb.DB, relation, key, want string) {
	t.Helper()
	got := queryText(t, d, `SELECT coalesce((SELECT p.image::text FROM synchro.projection p
		WHERE p.relation_id = (SELECT relation_id FROM synchro.relation WHERE relation_oid = $1::regclass) AND p.key = $2), '')`,
		relation, key)
	if (got == "") != (want == "") || (want != "" && !queryBool(t, d, `SELECT $1::jsonb = $2::jsonb`, got, want)) {
		t.Fatalf("image of %s key %s is %q, want %q", relation, key, got, want)
	}
}

// schemaHash is the hash of the client schema manifest.
func schemaHash(t *testing.T, d *testdb.DB) string {
	t.Helper()
	return queryText(t, d, `SELECT (synchro.current_schema()).hash`)
}

// TestDriftBlocksCapture: drift of a registered relation's key, replica
// identity or publication, and writes that bypass the ordinary fence triggers,
// block the stream at the first transaction that shows them, with one redacted
// poison record naming the relation; nothing after it is materialized, and
// readiness is unready (also naming the catalog drift where it is visible).
func TestDriftBlocksCapture(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		prepare  string // DDL committed before the poison transaction
		poison   string
		class    string
		relation string
		// failing readiness checks besides worker (blocked) and poison
		readiness []string
	}{
		{name: "primary_key_moved_to_other_column", class: capture.ClassRelationDrift, relation: "app.t",
			prepare:   `ALTER TABLE app.t DROP CONSTRAINT t_pkey, ADD PRIMARY KEY (alt)`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k1', 'SECRET-123', '1', 'SECRET-a1')`,
			readiness: []string{"registry"}},
		{name: "primary_key_dropped", class: capture.ClassRelationDrift, relation: "app.t",
			prepare:   `ALTER TABLE app.t DROP CONSTRAINT t_pkey`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k2', 'SECRET-123', '1', 'SECRET-a2')`,
			readiness: []string{"registry"}},
		{name: "primary_key_made_deferrable", class: capture.ClassRelationDrift, relation: "app.t",
			// A deferrable key cannot back the replica identity: the decoded
			// relation has no key column.
			prepare:   `ALTER TABLE app.t DROP CONSTRAINT t_pkey, ADD PRIMARY KEY (id) DEFERRABLE`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k3', 'SECRET-123', '1', 'SECRET-a3')`,
			readiness: []string{"registry"}},
		{name: "replica_identity_nothing", class: capture.ClassRelationDrift, relation: "app.t",
			// Updates and deletes are refused by PostgreSQL; inserts still go.
			prepare:   `ALTER TABLE app.t REPLICA IDENTITY NOTHING`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k4', 'SECRET-123', '1', 'SECRET-a4')`,
			readiness: []string{"registry"}},
		{name: "replica_identity_using_index", class: capture.ClassRelationDrift, relation: "app.t",
			prepare:   `ALTER TABLE app.t REPLICA IDENTITY USING INDEX t_alt_key`,
			poison:    `UPDATE app.t SET v = 'SECRET-123' WHERE id = 'base'`,
			readiness: []string{"registry"}},
		{name: "publication_drops_table", class: capture.ClassFenceUnmatched, relation: "app.t",
			// The fence message still reaches the stream, the row change does not.
			prepare:   `ALTER PUBLICATION synchro DROP TABLE app.t`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k5', 'SECRET-123', '1', 'SECRET-a5')`,
			readiness: []string{"publication"}},
		{name: "publication_stops_publishing_updates", class: capture.ClassFenceUnmatched, relation: "app.t",
			prepare:   `ALTER PUBLICATION synchro SET (publish = 'insert, delete, truncate')`,
			poison:    `UPDATE app.t SET v = 'SECRET-123' WHERE id = 'base'`,
			readiness: []string{"publication"}},
		{name: "publication_not_via_partition_root", class: capture.ClassFenceUnmatched, relation: "app.parts",
			// Partition rows are published under the partition, which is not registered.
			prepare:   `ALTER PUBLICATION synchro SET (publish_via_partition_root = false)`,
			poison:    `INSERT INTO app.parts VALUES (7, 'SECRET-123')`,
			readiness: []string{"publication"}},
		{name: "publication_row_filter", class: capture.ClassFenceUnmatched, relation: "app.t",
			prepare: `ALTER PUBLICATION synchro DROP TABLE app.t;
				ALTER PUBLICATION synchro ADD TABLE app.t WHERE (id NOT LIKE 'SECRET%')`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k6', 'SECRET-123', '1', 'SECRET-a6')`,
			readiness: []string{"publication"}},
		{name: "publication_column_list", class: capture.ClassRelationDrift, relation: "app.t",
			// The registered column v is no longer published.
			prepare: `ALTER PUBLICATION synchro DROP TABLE app.t;
				ALTER PUBLICATION synchro ADD TABLE app.t (id, n, alt)`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k7', 'SECRET-123', '1', 'SECRET-a7')`,
			readiness: []string{"publication"}},
		{name: "session_replication_role_replica", class: capture.ClassFenceUnmatched, relation: "app.t",
			// The fence fires in every session (ENABLE ALWAYS); set back to
			// ordinary sessions only, it does not fire in a replica session.
			prepare: `ALTER TABLE app.t ENABLE TRIGGER synchro_fence`,
			poison: `SET LOCAL session_replication_role = replica;
				INSERT INTO app.t VALUES ('SECRET-k8', 'SECRET-123', '1', 'SECRET-a8')`},
		{name: "session_replication_role_replica_truncate", class: capture.ClassTruncate, relation: "app.t",
			// The truncate guard fires in every session (ENABLE ALWAYS); set
			// back to ordinary sessions only, it lets a replica session's
			// TRUNCATE of the relation through, which is decoded.
			prepare: `ALTER TABLE app.t ENABLE TRIGGER synchro_truncate_guard`,
			poison:  `SET LOCAL session_replication_role = replica; TRUNCATE app.t`},
		{name: "fence_trigger_enabled_replica_only", class: capture.ClassFenceUnmatched, relation: "app.t",
			prepare:   `ALTER TABLE app.t ENABLE REPLICA TRIGGER synchro_fence`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k9', 'SECRET-123', '1', 'SECRET-a9')`,
			readiness: []string{"triggers"}},
		// A registered column keeps its registered type: a new one would change
		// its values' type on the wire (and the client schema) with no row event
		// for the rows written before, even where the portable type stays.
		{name: "column_text_to_integer", class: capture.ClassRelationDrift, relation: "app.t",
			prepare:   `ALTER TABLE app.t ALTER COLUMN n TYPE integer USING n::integer`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k10', 'SECRET-123', 7, 'SECRET-a10')`,
			readiness: []string{"registry"}},
		{name: "column_integer_to_text", class: capture.ClassRelationDrift, relation: "app.k",
			prepare:   `ALTER TABLE app.k ALTER COLUMN q TYPE text`,
			poison:    `INSERT INTO app.k VALUES (2, 'SECRET-123', 'SECRET-q')`,
			readiness: []string{"registry"}},
		{name: "column_integer_to_bigint", class: capture.ClassRelationDrift, relation: "app.k",
			prepare:   `ALTER TABLE app.k ALTER COLUMN q TYPE bigint`,
			poison:    `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`,
			readiness: []string{"registry"}},
		{name: "column_text_to_varchar", class: capture.ClassRelationDrift, relation: "app.t",
			prepare:   `ALTER TABLE app.t ALTER COLUMN v TYPE varchar(200)`,
			poison:    `UPDATE app.t SET v = 'SECRET-123' WHERE id = 'base'`,
			readiness: []string{"registry"}},
		{name: "column_dropped_and_added_with_another_type", class: capture.ClassRelationDrift, relation: "app.t",
			prepare:   `ALTER TABLE app.t DROP COLUMN v; ALTER TABLE app.t ADD COLUMN v integer`,
			poison:    `INSERT INTO app.t VALUES ('SECRET-k11', '7', 'SECRET-a11', 42)`,
			readiness: []string{"registry"}},
		// A delete decodes the key alone: its type is checked too.
		{name: "key_integer_to_bigint", class: capture.ClassRelationDrift, relation: "app.k",
			prepare:   `ALTER TABLE app.k ALTER COLUMN id TYPE bigint`,
			poison:    `DELETE FROM app.k WHERE id = 1`,
			readiness: []string{"registry"}},
		{name: "key_integer_to_text", class: capture.ClassRelationDrift, relation: "app.k",
			prepare:   `ALTER TABLE app.k ALTER COLUMN id TYPE text`,
			poison:    `INSERT INTO app.k VALUES ('2', 'SECRET-123', 7)`,
			readiness: []string{"registry"}},
		{name: "key_integer_to_text_non_numeric", class: capture.ClassRelationDrift, relation: "app.k",
			prepare:   `ALTER TABLE app.k ALTER COLUMN id TYPE text`,
			poison:    `INSERT INTO app.k VALUES ('SECRET-k', 'SECRET-123', 7)`,
			readiness: []string{"registry"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDriftEnv(t)
			if tc.prepare != "" {
				e.d.Exec(t, tc.prepare)
			}
			bad := commitTxn(t, e.d, tc.poison)
			later := commitTxn(t, e.d, driftLater)
			e.requireBlockedBy(t, bad, later, tc.class, tc.relation)
			waitReadiness(t, e.d, append([]string{"worker", "poison"}, tc.readiness...)...)
		})
	}
}

// TestDriftRefusedBeforeCapture: drift that PostgreSQL or the capture triggers
// refuse up front never reaches the stream: the refused statement fails with
// its SQLSTATE, later transactions keep materializing, and readiness reports
// whatever catalog drift was left behind.
func TestDriftRefusedBeforeCapture(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		prepare, write string
		// SQLSTATEs of prepare and write ("" when it succeeds)
		prepareState, writeState string
		readiness                []string // failing readiness checks
	}{
		{name: "set_unlogged", prepareState: "55000",
			// A table in a publication cannot become unlogged.
			prepare: `ALTER TABLE app.t SET UNLOGGED`,
			write:   `UPDATE app.t SET v = 'after' WHERE id = 'base'`},
		{name: "key_update_with_key_guard_disabled", writeState: "0A000",
			// The fence rejects the key change the disabled guard let through.
			prepare:   `ALTER TABLE app.t DISABLE TRIGGER synchro_key_guard`,
			write:     `UPDATE app.t SET id = 'SECRET-k' WHERE id = 'base'`,
			readiness: []string{"triggers"}},
		{name: "key_column_renamed", writeState: "55000",
			// The fence no longer finds the registered key column.
			prepare:   `ALTER TABLE app.t RENAME COLUMN id TO ident`,
			write:     `INSERT INTO app.t VALUES ('SECRET-k', 'SECRET-123', '1', 'SECRET-a')`,
			readiness: []string{"registry"}},
		{name: "truncate_partition", writeState: "0A000",
			// Published via the root, a partition's TRUNCATE is never decoded:
			// registration put the truncate guard on the partition too.
			write: `TRUNCATE app.parts_1`},
		{name: "truncate_in_replica_session", writeState: "0A000",
			// The truncate guards fire in every session (ENABLE ALWAYS), also
			// where ordinary triggers do not (a subscription's apply worker).
			write: `SET LOCAL session_replication_role = replica; TRUNCATE app.t`},
		{name: "key_update_in_replica_session", writeState: "0A000",
			// The key guard fires in every session too.
			write: `SET LOCAL session_replication_role = replica; UPDATE app.t SET id = 'SECRET-k' WHERE id = 'base'`},
		{name: "truncate_partition_in_replica_session", writeState: "0A000",
			// A partition's TRUNCATE would never be decoded.
			write: `SET LOCAL session_replication_role = replica; TRUNCATE app.parts_1`},
		{name: "truncate_partition_created_later", prepareState: "0A000",
			// A new partition gets the row triggers (cloned) but not the truncate
			// guard until synchro.guard_partitions installs it.
			prepare: `CREATE TABLE app.parts_2 PARTITION OF app.parts FOR VALUES FROM (1000) TO (2000);
				SELECT synchro.guard_partitions(); TRUNCATE app.parts_2`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDriftEnv(t)
			d := e.d
			for _, step := range []struct{ sql, state string }{{tc.prepare, tc.prepareState}, {tc.write, tc.writeState}} {
				if err := d.ExecErr(step.sql); step.state != "" || err != nil {
					requireState(t, err, step.state, "")
				}
			}
			later := commitTxn(t, d, driftLater)
			waitMaterialized(t, d)
			ledgerOf(t, d, later)
			requireImage(t, d, "app.other", "2", `{"id": 2, "v": "SECRET-123"}`)
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
				t.Fatalf("%d poison records, want none", n)
			}
			waitReadiness(t, d, tc.readiness...)
		})
	}
}

// TestCatalogDriftBlocksCapture: drift that no decoded transaction shows (the
// stream carries a re-added column's name and type, and a partition's rows under
// the partitioned root; a detached or dropped partition leaves no row events)
// blocks capture from the catalog: nothing later is materialized, and readiness
// names the drift. Where the catalog can be put back (a partition's replica
// identity, a detached partition attached again) or the owner attests that a
// dropped partition held no rows (synchro.forget_lost_partition), capture
// resumes with the held transactions, each materialized once; a re-added
// column cannot be (its values are gone) and needs a stream reset. A partition
// of a partition is recorded and watched too.
func TestCatalogDriftBlocksCapture(t *testing.T) {
	t.Parallel()
	const (
		attach        = `ALTER TABLE app.parts ATTACH PARTITION app.parts_1 FOR VALUES FROM (0) TO (1000)`
		writeT        = `INSERT INTO app.t VALUES ('k2', 'SECRET-123', '7', 'a2')`
		lostReason    = " (detached or dropped while it may have held rows)"
		guardRepair   = `SELECT synchro.guard_partitions(); SELECT synchro.accept_partition_guards('app.parts')`
		unguarded     = "app.parts has partition app.parts_1 without a truncate guard that fires in every session"
		changedGuards = "app.parts has partition app.parts_1 whose guards changed since recorded"
	)
	imageT := [3]string{"app.t", "k2", `{"id": "k2", "v": "SECRET-123", "n": "7", "alt": "a2"}`}
	for _, tc := range []struct {
		name, ddl, then, write, reason, repair string
		image                                  [3]string // relation, key and image of write after the repair
		triggers                               bool      // the triggers check fails too
	}{
		{name: "column_dropped_and_added_again",
			ddl:    `ALTER TABLE app.t DROP COLUMN v; ALTER TABLE app.t ADD COLUMN v text`,
			write:  `INSERT INTO app.t VALUES ('SECRET-k', '1', 'SECRET-a', 'SECRET-123')`,
			reason: "app.t has a registered column dropped and added again"},
		{name: "partition_replica_identity_full",
			ddl:    `ALTER TABLE app.parts_1 REPLICA IDENTITY FULL`,
			write:  `UPDATE app.parts SET v = 'SECRET-123' WHERE id = 1`,
			reason: "app.parts has a partition with a replica identity other than DEFAULT",
			repair: `ALTER TABLE app.parts_1 REPLICA IDENTITY DEFAULT`,
			image:  [3]string{"app.parts", "1", `{"id": 1, "v": "SECRET-123"}`}},
		{name: "partition_detached", ddl: `ALTER TABLE app.parts DETACH PARTITION app.parts_1`, write: writeT,
			reason: "app.parts lost partition app.parts_1" + lostReason, repair: attach, image: imageT},
		{name: "partition_detached_concurrently", ddl: `ALTER TABLE app.parts DETACH PARTITION app.parts_1 CONCURRENTLY`,
			write: writeT, reason: "app.parts lost partition app.parts_1" + lostReason, repair: attach, image: imageT},
		{name: "partition_dropped", ddl: `DROP TABLE app.parts_1`, write: writeT,
			reason: "app.parts lost partition app.parts_1" + lostReason,
			repair: `SELECT synchro.forget_lost_partition('app.parts_1')`, image: imageT},
		{name: "subpartition_dropped",
			ddl: `CREATE TABLE app.parts_2 PARTITION OF app.parts FOR VALUES FROM (1000) TO (2000) PARTITION BY RANGE (id);
				CREATE TABLE app.parts_2a PARTITION OF app.parts_2 FOR VALUES FROM (1000) TO (1500);
				SELECT synchro.guard_partitions();
				INSERT INTO app.parts VALUES (1001, 'SECRET-123');
				DROP TABLE app.parts_2a`,
			write: writeT, reason: "app.parts lost partition app.parts_2a" + lostReason,
			repair: `SELECT synchro.forget_lost_partition('app.parts_2a')`, image: imageT},
		// pgoutput never sends a partition's TRUNCATE: while the partition's guard
		// may not fire, one could empty it unseen. guard_partitions restores the
		// guard (the owner attests that the partition was not truncated).
		// ALTER COLUMN ... TYPE ... USING that keeps the type changes values
		// without row events: capture blocks until the owner wrote the rows
		// again and accepts the rewrite.
		{name: "column_rewritten_in_place", ddl: `ALTER TABLE app.t ALTER COLUMN v TYPE text USING upper(v)`,
			write: writeT, reason: "app.t had registered column v rewritten in place in app.t",
			repair: `UPDATE app.t SET id = id WHERE id = 'base'; SELECT synchro.accept_rewrite('app.t')`,
			image:  [3]string{"app.t", "base", `{"id": "base", "v": "PLAIN", "n": "5", "alt": "a0"}`}},
		{name: "partition_column_rewritten_in_place", ddl: `ALTER TABLE app.parts ALTER COLUMN v TYPE text USING upper(v)`,
			write: writeT, reason: "app.parts had registered column v rewritten in place in app.parts_1",
			repair: `UPDATE app.parts SET id = id WHERE id = 1; SELECT synchro.accept_rewrite('app.parts')`,
			image:  [3]string{"app.parts", "1", `{"id": 1, "v": "PLAIN"}`}},
		// The rewrite stays drift whatever DDL writes the table's or the
		// column's catalog row again, in the same transaction or later, until
		// accepted.
		{name: "column_rewritten_then_column_added",
			ddl: `ALTER TABLE app.t ALTER COLUMN v TYPE text USING upper(v)`, then: `ALTER TABLE app.t ADD COLUMN extra int`,
			write: writeT, reason: "app.t had registered column v rewritten in place in app.t",
			repair: `UPDATE app.t SET id = id WHERE id = 'base'; SELECT synchro.accept_rewrite('app.t')`,
			image:  [3]string{"app.t", "base", `{"id": "base", "v": "PLAIN", "n": "5", "alt": "a0"}`}},
		{name: "column_rewritten_then_statistics_in_savepoint",
			ddl: `BEGIN; ALTER TABLE app.t ALTER COLUMN v TYPE text USING upper(v);
				SAVEPOINT s; ALTER TABLE app.t ALTER COLUMN v SET STATISTICS 100; RELEASE s; COMMIT`,
			write: writeT, reason: "app.t had registered column v rewritten in place in app.t",
			repair: `UPDATE app.t SET id = id WHERE id = 'base'; SELECT synchro.accept_rewrite('app.t')`,
			image:  [3]string{"app.t", "base", `{"id": "base", "v": "PLAIN", "n": "5", "alt": "a0"}`}},
		{name: "key_rewritten_then_clustered",
			ddl: `ALTER TABLE app.k ALTER COLUMN id TYPE int USING id + 1000`, then: `CLUSTER app.k USING k_pkey`,
			write: writeT, reason: "app.k had registered column id rewritten in place in app.k",
			repair: `SELECT synchro.accept_rewrite('app.k')`, image: imageT},
		{name: "column_rewritten_then_vacuum_full",
			ddl: `ALTER TABLE app.t ALTER COLUMN v TYPE text USING upper(v)`, then: `VACUUM FULL app.t`,
			write: writeT, reason: "app.t had registered column v rewritten in place in app.t",
			repair: `UPDATE app.t SET id = id WHERE id = 'base'; SELECT synchro.accept_rewrite('app.t')`,
			image:  [3]string{"app.t", "base", `{"id": "base", "v": "PLAIN", "n": "5", "alt": "a0"}`}},
		{name: "partition_column_rewritten_then_column_added",
			ddl: `ALTER TABLE app.parts ALTER COLUMN v TYPE text USING upper(v)`, then: `ALTER TABLE app.parts ADD COLUMN extra int`,
			write: writeT, reason: "app.parts had registered column v rewritten in place in app.parts_1",
			repair: `UPDATE app.parts SET id = id WHERE id = 1; SELECT synchro.accept_rewrite('app.parts')`,
			image:  [3]string{"app.parts", "1", `{"id": 1, "v": "PLAIN"}`}},
		// An inheritance child's rows are read through the table, but no fence
		// fires for them and the publication does not carry them.
		{name: "child_table_inherits",
			ddl:   `CREATE TABLE app.t_child () INHERITS (app.t); INSERT INTO app.t_child VALUES ('SECRET-c', 'SECRET-123', '1', 'SECRET-a')`,
			write: writeT, reason: "app.t has child table app.t_child (INHERITS)",
			repair: `ALTER TABLE app.t_child NO INHERIT app.t`, image: imageT},
		{name: "table_made_to_inherit",
			ddl:   `CREATE TABLE app.loose (id text NOT NULL, v text, n text, alt text NOT NULL); ALTER TABLE app.loose INHERIT app.t`,
			write: writeT, reason: "app.t has child table app.loose (INHERITS)",
			repair: `DROP TABLE app.loose`, image: imageT},
		{name: "partition_truncate_guard_disabled", ddl: `ALTER TABLE app.parts_1 DISABLE TRIGGER synchro_truncate_guard`,
			write: writeT, reason: unguarded, repair: guardRepair, image: imageT, triggers: true},
		{name: "partition_truncate_guard_dropped", ddl: `DROP TRIGGER synchro_truncate_guard ON app.parts_1`,
			write: writeT, reason: unguarded, repair: guardRepair, image: imageT, triggers: true},
		{name: "partition_truncate_guard_ordinary_sessions_only", ddl: `ALTER TABLE app.parts_1 ENABLE TRIGGER synchro_truncate_guard`,
			write: writeT, reason: unguarded, repair: guardRepair, image: imageT},
		// A guard that fires again may have let a TRUNCATE (or, for the
		// partition guard, a write while the partition was detached) through
		// in between: its changed pg_trigger row is drift until guard_partitions
		// records it again.
		{name: "partition_truncate_guard_disabled_and_enabled_again",
			ddl: `ALTER TABLE app.parts_1 DISABLE TRIGGER synchro_truncate_guard;
				ALTER TABLE app.parts_1 ENABLE ALWAYS TRIGGER synchro_truncate_guard`,
			write: writeT, reason: changedGuards, repair: guardRepair, image: imageT},
		{name: "partition_guard_disabled_and_enabled_again",
			ddl: `ALTER TABLE app.parts_1 DISABLE TRIGGER synchro_partition_guard;
				ALTER TABLE app.parts_1 ENABLE ALWAYS TRIGGER synchro_partition_guard`,
			write: writeT, reason: changedGuards, repair: guardRepair, image: imageT},
		// Recording a new partition attests nothing about the others: a
		// TRUNCATE that went past a toggled guard stays drift.
		{name: "partition_truncated_past_toggled_guard_then_partition_added",
			ddl: `BEGIN; ALTER TABLE app.parts_1 DISABLE TRIGGER synchro_truncate_guard; TRUNCATE app.parts_1;
				ALTER TABLE app.parts_1 ENABLE ALWAYS TRIGGER synchro_truncate_guard;
				CREATE TABLE app.parts_2 PARTITION OF app.parts FOR VALUES FROM (1000) TO (2000);
				SELECT synchro.guard_partitions(); COMMIT`,
			write: writeT, reason: changedGuards, repair: `SELECT synchro.accept_partition_guards('app.parts')`, image: imageT},
		{name: "partition_truncate_guard_dropped_and_created_again",
			ddl: `DROP TRIGGER synchro_truncate_guard ON app.parts_1;
				CREATE TRIGGER synchro_truncate_guard BEFORE TRUNCATE ON app.parts_1 FOR EACH STATEMENT EXECUTE FUNCTION synchro.truncate_guard();
				ALTER TABLE app.parts_1 ENABLE ALWAYS TRIGGER synchro_truncate_guard`,
			write: writeT, reason: changedGuards, repair: guardRepair, image: imageT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDriftEnv(t)
			d := e.d
			d.Exec(t, tc.ddl)
			if tc.then != "" {
				d.Exec(t, tc.then) // a statement of its own, right after
			}
			held := commitTxn(t, d, tc.write)
			later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
			requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
			if tc.triggers {
				waitReadiness(t, d, "worker", "registry", "triggers")
			} else {
				waitReadiness(t, d, "worker", "registry")
			}
			if reason := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'registry'`); !strings.Contains(reason, tc.reason) {
				t.Fatalf("registry check: %q, want %q", reason, tc.reason)
			}
			if tc.repair == "" {
				return
			}
			d.Exec(t, tc.repair)
			waitMaterialized(t, d)
			requireMaterializedOnce(t, d, 1, held, later)
			requireImage(t, d, tc.image[0], tc.image[1], tc.image[2])
			requireImage(t, d, "app.k", "2", `{"id": 2, "v": "SECRET-123", "q": 7}`)
			requireEffectVersions(t, d)
			requireDigests(t, d)
			waitReadiness(t, d)
		})
	}
}

// TestRenamedEnumValueBlocksCapture: ALTER TYPE ... RENAME VALUE changes the
// text of every row holding the value without a row event. Renaming a value of
// a registered column's enum type blocks capture from the catalog, whether
// registration recorded the value or the worker did after ALTER TYPE ... ADD
// VALUE (which itself keeps capturing), and whether the column holds the enum
// itself or a value built on it (a domain, an array, a range, a composite: a
// capture dependency captures columns of any type), until the owner writes the
// rows again and accepts the rename (synchro.accept_rewrite): then the held
// transactions are materialized once and the rows carry the new label.
func TestRenamedEnumValueBlocksCapture(t *testing.T) {
	t.Parallel()
	const synced = `CREATE TABLE app.e (id int PRIMARY KEY, m app.mood);
		SELECT synchro.register_table('app.e', '{"kind":"shared","scope":"all"}')`
	for _, tc := range []struct {
		name, value, prepare string
		table                string // creates and registers app.e (id int, m)
		m                    string // m holding $v, or happy for none; its image after the rename to blue
	}{
		{name: "value_recorded_at_registration", value: "sad", table: synced, m: "'$v'"},
		{name: "value_added_later", value: "calm", prepare: `ALTER TYPE app.mood ADD VALUE 'calm'`, table: synced, m: "'$v'"},
		{name: "domain_over_enum", value: "sad", m: "'$v'",
			table: `CREATE DOMAIN app.mood_d AS app.mood; CREATE TABLE app.e (id int PRIMARY KEY, m app.mood_d);
				SELECT synchro.register_dependency('app.e')`},
		{name: "enum_array", value: "sad", m: "'{$v,happy}'",
			table: `CREATE TABLE app.e (id int PRIMARY KEY, m app.mood[]); SELECT synchro.register_dependency('app.e')`},
		{name: "array_of_domain_over_enum", value: "calm", prepare: `ALTER TYPE app.mood ADD VALUE 'calm'`, m: "'{$v}'",
			table: `CREATE DOMAIN app.mood_d AS app.mood; CREATE TABLE app.e (id int PRIMARY KEY, m app.mood_d[]);
				SELECT synchro.register_dependency('app.e')`},
		{name: "enum_range", value: "sad", m: "'[$v,happy]'",
			table: `CREATE TYPE app.mood_range AS RANGE (subtype = app.mood); CREATE TABLE app.e (id int PRIMARY KEY, m app.mood_range);
				SELECT synchro.register_dependency('app.e')`},
		{name: "composite_with_enum", value: "sad", m: "ROW('$v', 1)",
			table: `CREATE TYPE app.mood_pair AS (m app.mood, n int); CREATE TABLE app.e (id int PRIMARY KEY, m app.mood_pair);
				SELECT synchro.register_dependency('app.e')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDriftEnv(t)
			d := e.d
			d.Exec(t, `CREATE TYPE app.mood AS ENUM ('sad', 'happy');`+tc.table)
			if tc.prepare != "" {
				d.Exec(t, tc.prepare)
			}
			m := func(v string) string { return strings.ReplaceAll(tc.m, "$v", v) }
			imageOf := func(v string) string {
				return queryText(t, d, `SELECT jsonb_build_object('id', 1, 'm', (`+m(v)+`)::text)::text`)
			}
			commitTxn(t, d, `INSERT INTO app.e VALUES (1, `+m(tc.value)+`), (2, `+m("happy")+`)`)
			waitMaterialized(t, d)
			requireImage(t, d, "app.e", "1", imageOf(tc.value))
			// The worker records an added value within about a second of a clean
			// catalog check.
			waitFor(t, "the worker recording the enum value", 30*time.Second, func() (bool, error) {
				return queryInt(t, d, `SELECT count(*) FROM synchro.relation_enum_label WHERE label = $1`, tc.value) == 1, nil
			})
			d.Exec(t, `ALTER TYPE app.mood RENAME VALUE '`+tc.value+`' TO 'blue'`)
			held := commitTxn(t, d, `INSERT INTO app.e VALUES (3, `+m("happy")+`)`)
			later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
			enumDriftAccepted(t, e, later, "app.e has a recorded value of enum type app.mood renamed (ALTER TYPE ... RENAME VALUE)")
			requireMaterializedOnce(t, d, 1, held, later)
			requireImage(t, d, "app.e", "1", imageOf("blue"))
			requireEffectVersions(t, d)
			requireDigests(t, d)
			waitReadiness(t, d)
		})
	}
}

// TestEnumValueRenamedBeforeRecordedBlocksCapture: a value added (ALTER TYPE
// ... ADD VALUE), written and renamed while the worker is down (or blocked, or
// within the second before it records added values) was recorded under its new
// name, while the rows written with it reach the stream with the old one:
// materializing a label that is no longer one of its type's labels is drift,
// and capture blocks from the next catalog check until the owner writes the
// rows again and accepts the rename. Also for a value an enum array holds.
func TestEnumValueRenamedBeforeRecordedBlocksCapture(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, table, m, blue string }{
		{"enum", `CREATE TABLE app.e (id int PRIMARY KEY, m app.mood);
			SELECT synchro.register_table('app.e', '{"kind":"shared","scope":"all"}')`, "'calm'", `"blue"`},
		{"enum_array", `CREATE TABLE app.e (id int PRIMARY KEY, m app.mood[]); SELECT synchro.register_dependency('app.e')`,
			"'{happy,calm}'", `"{happy,blue}"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDriftEnv(t)
			d := e.d
			d.Exec(t, `CREATE TYPE app.mood AS ENUM ('sad', 'happy');`+tc.table)
			waitMaterialized(t, d)
			if err := e.w.stop(t); err != nil {
				t.Fatalf("worker stopped with %v", err)
			}
			d.Exec(t, `ALTER TYPE app.mood ADD VALUE 'calm'`)
			written := commitTxn(t, d, `INSERT INTO app.e VALUES (1, `+tc.m+`)`)
			d.Exec(t, `ALTER TYPE app.mood RENAME VALUE 'calm' TO 'blue'`)
			startWorker(t, d, e.cfg)
			// The stale label is materialized (clients got it when it was
			// current); the block starts at the next catalog check.
			waitFor(t, "the row written with the old label materialized", 30*time.Second, func() (bool, error) {
				return queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, written.xid) == 1, nil
			})
			held := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
			enumDriftAccepted(t, e, held, "app.e has a row captured with a label of enum type app.mood that it no longer has")
			requireMaterializedOnce(t, d, 1, written, held)
			requireImage(t, d, "app.e", "1", `{"id": 1, "m": `+tc.blue+`}`)
			requireImage(t, d, "app.k", "2", `{"id": 2, "v": "SECRET-123", "q": 7}`)
			requireEffectVersions(t, d)
			requireDigests(t, d)
			waitReadiness(t, d)
		})
	}
}

// TestMaterializationRecordsDecodedEnumLabels: materialization records the enum
// values the images it materializes hold (synchro.record_decoded_enum_labels),
// also in an array, so that a value written before any catalog check recorded
// it is recorded under the label the rows carry: renaming it afterwards is
// drift. An image with a label the type no longer has (renamed after the row
// was written) is drift at once, until synchro.accept_rewrite records the
// labels again. Events of transactions the batch replays are left alone.
func TestMaterializationRecordsDecodedEnumLabels(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TYPE app.mood AS ENUM ('sad', 'happy');
		CREATE TABLE app.e (id int PRIMARY KEY, m app.mood, ms app.mood[], n text);
		SELECT synchro.register_dependency('app.e')`)
	d.Exec(t, `ALTER TYPE app.mood ADD VALUE 'calm'; ALTER TYPE app.mood ADD VALUE 'cool'`)
	rid := recordedRelationID(t, d, "app.e")
	const labels = `SELECT coalesce(string_agg(el.label || '=' || (el.enum_value <> 0), ',' ORDER BY el.label), '')
		FROM synchro.relation_enum_label el`
	stage := func(events string) int64 {
		t.Helper()
		ctx := context.Background()
		tx, err := d.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var n int64
		// Transaction 1 is new in the batch, transaction 2 a replay.
		if _, err := tx.Exec(ctx, `SELECT synchro.materialize_scratch()`); err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO synchro_seg_txn (seq) VALUES (1)`)
		}
		if err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO synchro_seg_event (seq, r, img) SELECT x.seq, $1, x.img
				FROM jsonb_to_recordset($2::jsonb) x(seq integer, img jsonb)`, rid, events)
		}
		if err == nil {
			err = tx.QueryRow(ctx, `SELECT synchro.record_decoded_enum_labels()`).Scan(&n)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := stage(`[{"seq": 1, "img": {"id": 1, "m": "calm", "ms": "{cool,sad}", "n": "gone"}},
		{"seq": 1, "img": {"id": 2, "m": null, "ms": "{NULL}"}}, {"seq": 2, "img": {"id": 3, "m": "gone"}}]`); n != 2 {
		t.Fatalf("recorded %d values, want calm and cool", n)
	}
	if got := queryText(t, d, labels); got != "calm=true,cool=true,happy=true,sad=true" {
		t.Fatalf("recorded labels %s", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.catalog_drift()`); n != 0 {
		t.Fatalf("%d relations drifted", n)
	}
	d.Exec(t, `ALTER TYPE app.mood RENAME VALUE 'calm' TO 'blue'`)
	want := []string{"app.e has a recorded value of enum type app.mood renamed (ALTER TYPE ... RENAME VALUE): registered values may have changed without row events"}
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); !slices.Equal(got, want) {
		t.Fatalf("catalog drift %v, want %v", got, want)
	}
	d.Exec(t, `SELECT synchro.accept_rewrite('app.e')`)
	if n := stage(`[{"seq": 1, "img": {"id": 1, "m": "calm"}}]`); n != 1 {
		t.Fatalf("recorded %d labels, want the one its type no longer has", n)
	}
	if got := queryText(t, d, labels); got != "blue=true,calm=false,cool=true,happy=true,sad=true" {
		t.Fatalf("recorded labels %s", got)
	}
	want = []string{"app.e has a row captured with a label of enum type app.mood that it no longer has (ALTER TYPE ... RENAME VALUE after the row was written): registered values changed without row events"}
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); !slices.Equal(got, want) {
		t.Fatalf("catalog drift %v, want %v", got, want)
	}
	d.Exec(t, `SELECT synchro.accept_rewrite('app.e')`)
	if got := queryText(t, d, labels); got != "blue=true,cool=true,happy=true,sad=true" {
		t.Fatalf("recorded labels after accept_rewrite %s", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.catalog_drift()`); n != 0 {
		t.Fatalf("%d relations drifted after accept_rewrite", n)
	}
}

// TestUnloggedPartitionBlocksCapture: an unlogged partition's rows never reach
// WAL, while its fences' messages do (each would wait for a row event that
// never comes), and a crash empties it without row events. A recorded
// partition made unlogged refuses writes and blocks capture, naming it, until
// it is made logged again; then the held transactions are materialized once.
// (PostgreSQL refuses SET UNLOGGED on a registered table itself, a member of
// the publication.)
func TestUnloggedPartitionBlocksCapture(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	d.Exec(t, `ALTER TABLE app.parts_1 SET UNLOGGED`)
	requireState(t, d.ExecErr(`INSERT INTO app.parts VALUES (2, 'SECRET-123')`), "55000", "partition app.parts_1 of registered relation app.parts is unlogged")
	held := commitTxn(t, d, `INSERT INTO app.t VALUES ('k2', 'SECRET-123', '7', 'a2')`)
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
	waitReadiness(t, d, "worker", "registry")
	want := "app.parts has partition app.parts_1 that is unlogged (SET UNLOGGED): its rows are not written to WAL"
	if reason := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'registry'`); !strings.Contains(reason, want) {
		t.Fatalf("registry check: %q, want %q", reason, want)
	}
	d.Exec(t, `ALTER TABLE app.parts_1 SET LOGGED`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, held, later)
	requireImage(t, d, "app.t", "k2", `{"id": "k2", "v": "SECRET-123", "n": "7", "alt": "a2"}`)
	requireImage(t, d, "app.k", "2", `{"id": 2, "v": "SECRET-123", "q": 7}`)
	waitReadiness(t, d)
}

// TestNewPartitionNeedsTruncateGuard: a partition created after registration
// has the cloned row triggers but no truncate or partition guard, which
// readiness reports until synchro.guard_partitions installs them (once).
func TestNewPartitionNeedsTruncateGuard(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	d.Exec(t, `CREATE TABLE app.parts_2 PARTITION OF app.parts FOR VALUES FROM (1000) TO (2000)`)
	waitReadiness(t, d, "triggers")
	if reason := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'triggers'`); !strings.Contains(reason, "synchro_partition_guard on app.parts_2 is missing") {
		t.Fatalf("triggers check: %q, want the missing partition guard of app.parts_2", reason)
	}
	for i, want := range []int64{2, 0} {
		if n := queryInt(t, d, `SELECT synchro.guard_partitions()`); n != want {
			t.Fatalf("call %d of guard_partitions installed %d guards, want %d", i+1, n, want)
		}
	}
	requireRecorded(t, d, "app.parts_1", "app.parts_2")
	waitReadiness(t, d)
}

// requireRecorded asserts the partitions recorded in synchro.relation_partition
// (their names when recorded), in name order.
func requireRecorded(t *testing.T, d *testdb.DB, want ...string) {
	t.Helper()
	if got := rowsOf(t, d, `SELECT partition_name FROM synchro.relation_partition ORDER BY 1`); !slices.Equal(got, want) {
		t.Fatalf("recorded partitions %v, want %v", got, want)
	}
}

// waitStorageRecorded waits until the worker recorded the storage and the
// registered columns of every registered table and recorded partition as they
// are (synchro.record_storage at its catalog checks).
func waitStorageRecorded(t *testing.T, d *testdb.DB) {
	t.Helper()
	waitFor(t, "the worker recording storage", 30*time.Second, func() (bool, error) {
		return queryBool(t, d, `SELECT NOT EXISTS (SELECT FROM synchro.relation r JOIN pg_class c ON c.oid = r.relation_oid
				WHERE (r.relfilenode, r.column_xmins) IS DISTINCT FROM (c.relfilenode, synchro.column_xmins(c.oid, r.columns)))
			AND NOT EXISTS (SELECT FROM synchro.relation_partition rp JOIN synchro.relation r USING (relation_id)
				JOIN pg_class c ON c.oid = rp.partition_oid
				WHERE (rp.relfilenode, rp.column_xmins) IS DISTINCT FROM (c.relfilenode, synchro.column_xmins(c.oid, r.columns)))`), nil
	})
}

// TestAddedUnsyncedColumnKeepsCapturing: a column added after registration is
// not synced: with a constant or a volatile default (a table rewrite), later
// inserts and updates, also updates of the new column alone, materialize
// images of exactly the registered columns, the client schema stays the same,
// and readiness stays ready.
func TestAddedUnsyncedColumnKeepsCapturing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ddl string }{
		{"constant_default", `ALTER TABLE app.t ADD COLUMN extra text DEFAULT 'SECRET-default'`},
		{"not_null_default", `ALTER TABLE app.t ADD COLUMN extra text NOT NULL DEFAULT 'SECRET-default'`},
		{"volatile_default_rewrite", `ALTER TABLE app.t ADD COLUMN extra text DEFAULT 'SECRET-' || clock_timestamp()`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDriftEnv(t)
			d := e.d
			hash := schemaHash(t, d)
			d.Exec(t, tc.ddl)
			commitTxn(t, d, `UPDATE app.t SET v = 'after' WHERE id = 'base';
				INSERT INTO app.t (id, v, n, alt) VALUES ('k2', 'new', '7', 'a2');
				INSERT INTO app.t (id, v, n, alt, extra) VALUES ('k3', 'new', '8', 'a3', 'SECRET-extra')`)
			c := commitTxn(t, d, `UPDATE app.t SET extra = 'SECRET-changed' WHERE id = 'k2'`)
			waitMaterialized(t, d)
			requireImage(t, d, "app.t", "base", `{"id": "base", "v": "after", "n": "5", "alt": "a0"}`)
			requireImage(t, d, "app.t", "k2", `{"id": "k2", "v": "new", "n": "7", "alt": "a2"}`)
			requireImage(t, d, "app.t", "k3", `{"id": "k3", "v": "new", "n": "8", "alt": "a3"}`)
			if _, _, events, applied := ledgerOf(t, d, c); events != 1 || applied != 1 {
				t.Fatalf("update of the unsynced column: %d/%d events, want 1/1", events, applied)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.row_version WHERE image::text LIKE '%SECRET%'`); n != 0 {
				t.Fatalf("%d row versions hold the unsynced column", n)
			}
			if got := schemaHash(t, d); got != hash {
				t.Fatalf("client schema hash changed from %s to %s", hash, got)
			}
			waitReadiness(t, d)
		})
	}
}

// TestHarmlessRelationChangesKeepCapturing: changes that keep every registered
// column's type and values, the key and its replica identity, and the
// set of rows: capture goes on with correct images, the client schema stays the
// same, and readiness stays ready.
func TestHarmlessRelationChangesKeepCapturing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, prepare, write string
		each                 []string    // statements run one at a time before prepare
		images               [][3]string // relation, key, image
	}{
		{name: "column_type_modifier_widened",
			// The type stays (varchar), only its length limit changes.
			prepare: `ALTER TABLE app.k ALTER COLUMN v TYPE varchar(200)`,
			write:   `UPDATE app.k SET q = 6 WHERE id = 1; INSERT INTO app.k VALUES (2, 'new', 7)`,
			images: [][3]string{{"app.k", "1", `{"id": 1, "v": "plain", "q": 6}`},
				{"app.k", "2", `{"id": 2, "v": "new", "q": 7}`}}},
		{name: "primary_key_recreated_on_same_column",
			prepare: `ALTER TABLE app.t DROP CONSTRAINT t_pkey, ADD CONSTRAINT t_key_again PRIMARY KEY (id)`,
			write:   `UPDATE app.t SET v = 'after' WHERE id = 'base'; INSERT INTO app.t VALUES ('k2', 'new', '7', 'a2')`,
			images: [][3]string{{"app.t", "base", `{"id": "base", "v": "after", "n": "5", "alt": "a0"}`},
				{"app.t", "k2", `{"id": "k2", "v": "new", "n": "7", "alt": "a2"}`}}},
		{name: "replica_identity_back_to_default",
			prepare: `ALTER TABLE app.t REPLICA IDENTITY FULL; ALTER TABLE app.t REPLICA IDENTITY DEFAULT`,
			write:   `UPDATE app.t SET v = 'after' WHERE id = 'base'`,
			images:  [][3]string{{"app.t", "base", `{"id": "base", "v": "after", "n": "5", "alt": "a0"}`}}},
		{name: "empty_partition_attached",
			// Row triggers are cloned onto the attached partition; the truncate
			// guard is installed by synchro.guard_partitions.
			prepare: `CREATE TABLE app.parts_2 (id bigint PRIMARY KEY, v text);
				ALTER TABLE app.parts ATTACH PARTITION app.parts_2 FOR VALUES FROM (1000) TO (2000);
				SELECT synchro.guard_partitions()`,
			write: `INSERT INTO app.parts VALUES (1500, 'via root'); INSERT INTO app.parts_2 VALUES (1501, 'direct');
				UPDATE app.parts_2 SET v = 'updated' WHERE id = 1500; DELETE FROM app.parts_2 WHERE id = 1501`,
			images: [][3]string{{"app.parts", "1500", `{"id": 1500, "v": "updated"}`}, {"app.parts", "1501", ""}}},
		{name: "partition_created",
			prepare: `CREATE TABLE app.parts_3 PARTITION OF app.parts FOR VALUES FROM (2000) TO (3000);
				SELECT synchro.guard_partitions()`,
			write:  `INSERT INTO app.parts_3 VALUES (2500, 'direct')`,
			images: [][3]string{{"app.parts", "2500", `{"id": 2500, "v": "direct"}`}}},
		// New storage without a registered value rewritten, and a registered
		// column's definition changed without new storage: not a rewrite in
		// place. The worker records each (the statements wait for it): both
		// kinds between two of its checks read as a rewrite.
		{name: "table_rewritten_without_registered_values",
			each: []string{`VACUUM FULL app.t`, `CLUSTER app.t USING t_pkey`, `VACUUM FULL app.parts_1`,
				`ALTER TABLE app.t ADD COLUMN extra int`, `ALTER TABLE app.t ALTER COLUMN extra TYPE bigint`,
				`ALTER TABLE app.t ALTER COLUMN v SET DEFAULT 'd', ALTER COLUMN v SET STATISTICS 500`,
				`ALTER TABLE app.t ALTER COLUMN v TYPE text USING v`, `VACUUM FULL app.t`},
			write: `UPDATE app.t SET n = '6' WHERE id = 'base'; INSERT INTO app.parts VALUES (2, 'new')`,
			images: [][3]string{{"app.t", "base", `{"id": "base", "v": "plain", "n": "6", "alt": "a0"}`},
				{"app.parts", "2", `{"id": 2, "v": "new"}`}}},
		// Maintenance and column settings that keep every registered value:
		// each gives new storage alone, writes a registered column's
		// definition alone, or neither (the worker records each).
		{name: "maintenance_and_column_settings",
			each: []string{`ANALYZE app.t`, `VACUUM app.t`, `REINDEX TABLE app.t`, `CREATE INDEX ON app.t (lower(v))`,
				`ALTER TABLE app.t SET (fillfactor = 50)`, `COMMENT ON COLUMN app.t.v IS 'note'`,
				`GRANT SELECT (v) ON app.t TO PUBLIC`, `ALTER TABLE app.t ALTER COLUMN v SET STORAGE EXTERNAL`,
				`ALTER TABLE app.t ALTER COLUMN n TYPE text COLLATE "C"`, `ALTER TABLE app.k ALTER COLUMN v TYPE varchar(60)`,
				`ALTER TABLE app.t ADD COLUMN extra timestamptz DEFAULT clock_timestamp()`},
			write: `UPDATE app.t SET n = '6' WHERE id = 'base'; UPDATE app.k SET q = 6 WHERE id = 1`,
			images: [][3]string{{"app.t", "base", `{"id": "base", "v": "plain", "n": "6", "alt": "a0"}`},
				{"app.k", "1", `{"id": 1, "v": "plain", "q": 6}`}}},
		{name: "replica_session_writes",
			// Capture triggers fire in replica sessions too (a subscription's
			// apply worker writes in one), also on partitions created later.
			prepare: `CREATE TABLE app.parts_3 PARTITION OF app.parts FOR VALUES FROM (2000) TO (3000);
				SELECT synchro.guard_partitions()`,
			write: `SET LOCAL session_replication_role = replica;
				UPDATE app.t SET v = 'after' WHERE id = 'base'; INSERT INTO app.t VALUES ('k2', 'new', '7', 'a2');
				UPDATE app.parts SET v = 'after' WHERE id = 1; INSERT INTO app.parts_3 VALUES (2500, 'direct')`,
			images: [][3]string{{"app.t", "base", `{"id": "base", "v": "after", "n": "5", "alt": "a0"}`},
				{"app.t", "k2", `{"id": "k2", "v": "new", "n": "7", "alt": "a2"}`},
				{"app.parts", "1", `{"id": 1, "v": "after"}`}, {"app.parts", "2500", `{"id": 2500, "v": "direct"}`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDriftEnv(t)
			d := e.d
			hash := schemaHash(t, d)
			for _, stmt := range tc.each {
				d.Exec(t, stmt)
				waitStorageRecorded(t, d)
			}
			if tc.prepare != "" {
				d.Exec(t, tc.prepare)
			}
			commitTxn(t, d, tc.write)
			waitMaterialized(t, d)
			for _, img := range tc.images {
				requireImage(t, d, img[0], img[1], img[2])
			}
			requireEffectVersions(t, d)
			requireDigests(t, d)
			if got := schemaHash(t, d); got != hash {
				t.Fatalf("client schema hash changed from %s to %s", hash, got)
			}
			waitReadiness(t, d)
		})
	}
}

// TestHarmlessRelationChangesRecordedWhileBlocked: while capture is blocked (by
// drift of another relation, or by a poison transaction) the worker still
// records harmless changes of registered tables, each kind on its own: new
// storage alone (VACUUM FULL) and a registered column's definition alone (SET
// STATISTICS). Both kinds during the block must not read as a rewrite in place
// once the block is repaired: capture goes on and readiness is ready.
func TestHarmlessRelationChangesRecordedWhileBlocked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, block, repair string }{
		{"blocked_by_catalog_drift", `CREATE TABLE app.k_child () INHERITS (app.k)`, `DROP TABLE app.k_child`},
		{"blocked_by_poison", `SELECT synchro.quarantine('0/10', '0/20', 1, 'injected', NULL, NULL)`,
			`UPDATE synchro.poison_txn SET resolved_at = now()`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newDriftEnv(t)
			d := e.d
			d.Exec(t, tc.block)
			// A new session meets the block at its start.
			if err := e.w.stop(t); err != nil {
				t.Fatalf("worker stopped with %v", err)
			}
			held := commitTxn(t, d, `INSERT INTO app.t VALUES ('k2', 'SECRET-123', '7', 'a2')`)
			startWorker(t, d, e.cfg)
			waitBlocked(t, d, e.cfg.WorkerID, 300*time.Millisecond)
			for _, stmt := range []string{`VACUUM FULL app.t`, `ALTER TABLE app.t ALTER COLUMN v SET STATISTICS 500`} {
				d.Exec(t, stmt)
				waitStorageRecorded(t, d)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, held.xid); n != 0 {
				t.Fatalf("capture went on while blocked")
			}
			d.Exec(t, tc.repair)
			waitMaterialized(t, d)
			requireMaterializedOnce(t, d, 1, held)
			requireImage(t, d, "app.t", "k2", `{"id": "k2", "v": "SECRET-123", "n": "7", "alt": "a2"}`)
			waitReadiness(t, d)
		})
	}
}

// TestDroppedPublicationStopsCapture: with the capture publication dropped,
// nothing is materialized or acknowledged past the last durable transaction and
// readiness reports the missing publication. Before PostgreSQL 18 the walsender
// cannot decode the next change: the worker's sessions fail and it never reports
// streaming again (no poison record: the failure is the decoder's, not a
// decoded transaction's). From 18 on, pgoutput skips a missing publication with
// a warning and goes on without its relations, as if the publication had
// dropped them (TestCatalogDriftBlocksCapture, publication_drops_table): the
// fence message of the next registered write arrives without its row change,
// and that transaction is quarantined as fence_unmatched.
func TestDroppedPublicationStopsCapture(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	skipsMissing := queryInt(t, d, `SELECT current_setting('server_version_num')::int`) >= 180000
	before := queryText(t, d, `SELECT processed_end_lsn::text FROM synchro.progress`)
	d.Exec(t, `DROP PUBLICATION synchro`)
	bad := commitTxn(t, d, `INSERT INTO app.t VALUES ('SECRET-k', 'SECRET-123', '1', 'SECRET-a')`)
	later := commitTxn(t, d, driftLater)
	if skipsMissing {
		waitReadiness(t, d, "worker", "publication", "poison")
		if got, want := queryText(t, d, `SELECT string_agg(failure_class || ' ' || xid, ', ') FROM synchro.poison_txn`), fmt.Sprintf("fence_unmatched %d", bad.xid); got != want {
			t.Fatalf("poison records %q, want %q", got, want)
		}
	} else {
		waitFor(t, "the walsender's refusal in the worker log", 30*time.Second, func() (bool, error) {
			return strings.Contains(e.log.String(), `publication \"synchro\" does not exist`), nil
		})
		waitState(t, d, e.cfg.WorkerID, "retrying")
		waitReadiness(t, d, "worker", "publication")
		if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
			t.Fatalf("%d poison records", n)
		}
	}
	if !queryBool(t, d, `SELECT processed_end_lsn <= $1::pg_lsn AND coalesce(acknowledged_end_lsn, generation_start_lsn) <= $1::pg_lsn
		FROM synchro.progress`, bad.before) {
		t.Fatalf("progress moved past the dropped publication (before: %s): %s", before, progressRow(t, d))
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence f WHERE f.fence_id = ANY ($1::uuid[]) AND NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`,
		append(bad.fences, later.fences...)); n != int64(len(bad.fences)+len(later.fences)) || n == 0 {
		t.Fatalf("transactions after the dropped publication were materialized")
	}
	requireRedacted(t, d, e.log)
}

// TestAcceptRewriteRefusesUnregistered: the owner's attestations
// (accept_rewrite, accept_partition_guards) record nothing for a relation that
// is not registered (42704) and change nothing.
func TestAcceptRewriteRefusesUnregistered(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, driftSetup)
	d.Exec(t, `CREATE TABLE app.plain (id int PRIMARY KEY)`)
	const recorded = `SELECT r.relation_id || ' ' || r.relfilenode || ' ' || r.column_xmins::text || ' ' || coalesce(rp.guards, '')
		FROM synchro.relation r LEFT JOIN synchro.relation_partition rp USING (relation_id) ORDER BY 1`
	before := rowsOf(t, d, recorded)
	for _, fn := range []string{"accept_rewrite", "accept_partition_guards"} {
		_, err := d.Pool.Exec(context.Background(), `SELECT synchro.`+fn+`('app.plain')`)
		if sqlState(err) != "42704" {
			t.Fatalf("%s of an unregistered table: %v, want SQLSTATE 42704", fn, err)
		}
	}
	if got := rowsOf(t, d, recorded); !slices.Equal(got, before) {
		t.Fatalf("recorded storage and guards changed from %v to %v", before, got)
	}
}

// enumDriftAccepted requires capture blocked by catalog drift of app.e before
// held, with the registry check giving reason; the owner then writes app.e's
// rows again and accepts the rename, and capture materializes what waited.
func enumDriftAccepted(t *testing.T, e *driftEnv, held committed, reason string) {
	t.Helper()
	d := e.d
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, held)
	waitReadiness(t, d, "worker", "registry")
	if got := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'registry'`); !strings.Contains(got, reason) {
		t.Fatalf("registry check: %q, want %q", got, reason)
	}
	d.Exec(t, `UPDATE app.e SET id = id; SELECT synchro.accept_rewrite('app.e')`)
	waitMaterialized(t, d)
}
