package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// decodedTxn finds the transaction of xid among decoded transactions.
func decodedTxn(t *testing.T, txns []*capture.Txn, xid int64) *capture.Txn {
	t.Helper()
	for _, txn := range txns {
		if int64(txn.Xid) == xid {
			return txn
		}
	}
	t.Fatalf("transaction %d not decoded", xid)
	return nil
}

// decodedRows renders the row events of a decoded transaction as op:relation:key.
func decodedRows(txn *capture.Txn) []string {
	var out []string
	for _, ev := range txn.Rows {
		k, _ := ev.Value("id")
		out = append(out, fmt.Sprintf("%s:%s:%s", ev.Op, ev.Relation.Name, k.Text))
	}
	return out
}

// TestRegistrationInTransactionThatCreatesAndWrites: CREATE TABLE, a write and
// its delete (registration refuses a populated table), register_table, another
// write, in one source transaction. pgoutput sends no row event for the writes
// before the table joined the publication; the write after the activation
// message is materialized under the new generation.
func TestRegistrationInTransactionThatCreatesAndWrites(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app`)
	cfg := workerConfig(d, "w1")
	startStreaming(t, d, cfg)
	peek := d.CreateSlot(t)
	genBefore := maxGeneration(t, d)

	c := commitTxn(t, d, `CREATE TABLE app.n (id int PRIMARY KEY, v text);
		INSERT INTO app.n VALUES (1, 'before');
		DELETE FROM app.n;
		SELECT synchro.register_table('app.n', '{"kind":"shared","scope":"all"}');
		INSERT INTO app.n VALUES (2, 'after')`)
	waitMaterialized(t, d)
	gen := maxGeneration(t, d)
	if gen != genBefore+1 {
		t.Fatalf("registration created generation %d, want %d", gen, genBefore+1)
	}
	txn := decodedTxn(t, d.Decode(t, peek), c.xid)
	if got := decodedRows(txn); !slices.Equal(got, []string{"insert:n:2"}) {
		t.Fatalf("pgoutput sent row events %v, want only the insert after the registration", got)
	}
	if len(txn.Activations) != 1 || txn.Activations[0].Generation != gen || txn.Activations[0].Before != 0 {
		t.Fatalf("activations %+v, want generation %d before event 0", txn.Activations, gen)
	}

	commitLSN, _, events, applied := ledgerOf(t, d, c)
	if events != 1 || applied != 1 {
		t.Fatalf("txn_ledger: event_count %d, applied_count %d; want 1 and 1", events, applied)
	}
	n := tableID(t, d, "n")
	requireEffects(t, "effects of the registering transaction", effects(t, d, commitLSN), []effect{
		{scope: "all", event: 0, ordNum: 0, tableID: n, key: "2", op: "upsert", version: rowVersion(t, d, "app.n", "2")},
	})
	if got := rowsOf(t, d, `SELECT key FROM synchro.synced_row WHERE table_id = $1`, n); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("synced rows %v, want only the row written after the activation", got)
	}
	if got := queryInt(t, d, `SELECT registry_generation FROM synchro.progress`); got != gen {
		t.Fatalf("progress registry_generation %d, want %d", got, gen)
	}
	waitFor(t, "heartbeat registry generation", 30*time.Second, func() (bool, error) {
		var g *int64
		err := d.Pool.QueryRow(context.Background(), `SELECT registry_generation FROM synchro.worker_heartbeat WHERE worker_id = $1`, cfg.WorkerID).Scan(&g)
		return g != nil && *g == gen, err
	})
	requireDigests(t, d)
}

const activationSetup = `CREATE SCHEMA app;
	CREATE TABLE app.a (id int PRIMARY KEY, v text);
	SELECT synchro.register_table('app.a', '{"kind":"shared","scope":"all"}');
	CREATE TABLE app.b (id int PRIMARY KEY, v text)`

// activationTxn writes registered table a, then writes b (not registered yet)
// and deletes those rows (registration refuses a populated table), then
// registers b, then writes b (a key written before too) and a again.
const activationTxn = `INSERT INTO app.a VALUES (1, 'x');
	INSERT INTO app.b VALUES (1, 'b before'), (100, 'before');
	DELETE FROM app.b;
	SELECT synchro.register_table('app.b', '{"kind":"shared","scope":"all"}');
	INSERT INTO app.b VALUES (2, 'b after'), (100, 'after');
	INSERT INTO app.a VALUES (2, 'y')`

// TestRegistrationBetweenWritesInOneTransaction: row events before the
// activation message use the prior registry generation, later ones the new one.
// When b is not in the publication before its registration, pgoutput sends none
// of its earlier rows. When it already is (an operator added it, or a
// publication for all tables), those rows are decoded and must be skipped as
// unregistered, not treated as unfenced rows of b; also when the transaction
// is replayed after a crash that left it durable but unacknowledged.
func TestRegistrationBetweenWritesInOneTransaction(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		published bool
		crash     bool
		wantRows  []string // row events pgoutput sends
		wantOrds  []int    // ordinals of the applicable events
	}{
		{"unpublished", false, false,
			[]string{"insert:a:1", "insert:b:2", "insert:b:100", "insert:a:2"}, []int{0, 1, 2, 3}},
		{"published", true, false,
			[]string{"insert:a:1", "insert:b:1", "insert:b:100", "delete:b:1", "delete:b:100", "insert:b:2", "insert:b:100", "insert:a:2"}, []int{0, 5, 6, 7}},
		{"published_replayed_after_crash", true, true,
			[]string{"insert:a:1", "insert:b:1", "insert:b:100", "delete:b:1", "delete:b:100", "insert:b:2", "insert:b:100", "insert:a:2"}, []int{0, 5, 6, 7}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			d.Exec(t, activationSetup)
			if tc.published {
				d.Exec(t, `ALTER PUBLICATION synchro ADD TABLE app.b`)
			}
			cfg := workerConfig(d, "w1")
			runCfg := cfg
			var crashed atomic.Bool
			if tc.crash {
				// Stop right after the transaction is durable, before the slot moves.
				runCfg.AfterStep = func(s wal.Step) error {
					if s != wal.StepMaterialized || crashed.Load() {
						return nil
					}
					var done bool
					if err := d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM synchro.txn_ledger WHERE applied_count > 0)`).Scan(&done); err != nil || !done {
						return err
					}
					crashed.Store(true)
					return errors.New("simulated crash")
				}
			}
			w := startStreaming(t, d, runCfg)
			peek := d.CreateSlot(t)
			genBefore := queryInt(t, d, `SELECT registry_generation FROM synchro.progress`)
			c := commitTxn(t, d, activationTxn)
			if tc.crash {
				if err := w.waitExit(t, 30*time.Second); !errors.Is(err, wal.ErrStopped) {
					t.Fatalf("crashing worker returned %v", err)
				}
				if !queryBool(t, d, `SELECT processed_end_lsn > coalesce(acknowledged_end_lsn, generation_start_lsn) FROM synchro.progress`) {
					t.Fatalf("the crash did not leave the transaction durable and unacknowledged")
				}
				startWorker(t, d, cfg)
			}
			waitMaterialized(t, d)
			gen := maxGeneration(t, d)

			txn := decodedTxn(t, d.Decode(t, peek), c.xid)
			if got := decodedRows(txn); !slices.Equal(got, tc.wantRows) {
				t.Fatalf("pgoutput sent row events %v, want %v", got, tc.wantRows)
			}
			commitLSN, _, events, applied := ledgerOf(t, d, c)
			if events != len(tc.wantRows) || applied != 4 {
				t.Fatalf("txn_ledger: event_count %d, applied_count %d; want %d and 4", events, applied, len(tc.wantRows))
			}
			var ords []string
			for _, o := range tc.wantOrds {
				ords = append(ords, fmt.Sprint(o))
			}
			if got := rowsOf(t, d, `SELECT event_ordinal FROM synchro.event_ledger WHERE commit_lsn = $1::pg_lsn ORDER BY 1`, commitLSN); !slices.Equal(got, ords) {
				t.Fatalf("event ledger ordinals %v, want %v", got, ords)
			}
			a, b := tableID(t, d, "a"), tableID(t, d, "b")
			requireEffects(t, "effects of the transaction", effects(t, d, commitLSN), []effect{
				{scope: "all", event: tc.wantOrds[0], tableID: a, key: "1", op: "upsert", version: rowVersion(t, d, "app.a", "1")},
				{scope: "all", event: tc.wantOrds[1], tableID: b, key: "2", op: "upsert", version: rowVersion(t, d, "app.b", "2")},
				{scope: "all", event: tc.wantOrds[2], tableID: b, key: "100", op: "upsert", version: rowVersion(t, d, "app.b", "100")},
				{scope: "all", event: tc.wantOrds[3], tableID: a, key: "2", op: "upsert", version: rowVersion(t, d, "app.a", "2")},
			})
			// The rows written before the activation are not materialized as b.
			if got := rowsOf(t, d, `SELECT key FROM synchro.synced_row WHERE table_id = $1 ORDER BY key`, b); !slices.Equal(got, []string{"100", "2"}) {
				t.Fatalf("synced rows of b: %v, want 100 and 2", got)
			}
			if got := queryText(t, d, `SELECT image ->> 'v' FROM synchro.projection p JOIN synchro.synced_table s USING (relation_id)
				WHERE s.name = 'b' AND p.key = '100'`); got != "after" {
				t.Fatalf("projection of b:100 holds %q", got)
			}
			if got := queryInt(t, d, `SELECT registry_generation FROM synchro.progress`); got != gen || gen != genBefore+1 {
				t.Fatalf("progress registry_generation %d, want the activated generation %d (was %d)", got, gen, genBefore)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
				t.Fatalf("%d poison records", n)
			}
			requireDigests(t, d)
			requireProgressOrdering(t, d, cfg.Slot)
		})
	}
}
