package tests

// Adversarial audit of the capture worker's spill files (internal/capture/spill.go,
// Assembler.SpillAbove, wal prepare and the COPY reading images back): a
// transaction whose row data passes Config.SpillBytes keeps its later row
// events' pgoutput messages, and then their images, in an unlinked temporary
// file. Whatever is spilled, the worker must keep the contract of docs/change-stream.md: the same
// materialized state as without spilling (ordering, exactly-once identities,
// partial images completed), relation drift and poison detected with one
// redacted record, crash windows replayed exactly once, its own disk trouble
// retried instead of quarantined, and no spill file left open or named.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// spillProbe is the spill directory of one test's workers, and what was seen
// in it whenever a batch was received (StepReceived: prepared, not yet copied).
type spillProbe struct {
	dir   string
	most  atomic.Int64 // most spill files the process held open at a StepReceived
	named atomic.Int64 // directory entries seen at a StepReceived (spill files are unlinked at once)
}

// spillTo makes cfg's workers spill into a directory of the test's own and
// observe it at every StepReceived.
func spillTo(t *testing.T, cfg *wal.Config) *spillProbe {
	t.Helper()
	p := &spillProbe{dir: t.TempDir()}
	cfg.SpillDir = p.dir
	cfg.AfterStep = p.hook(cfg.AfterStep)
	return p
}

// hook observes the spill directory at StepReceived, then runs next (if any).
func (p *spillProbe) hook(next func(wal.Step) error) func(wal.Step) error {
	return func(s wal.Step) error {
		if s == wal.StepReceived {
			if fds, err := p.open(); err == nil {
				for n := int64(len(fds)); ; {
					cur := p.most.Load()
					if n <= cur || p.most.CompareAndSwap(cur, n) {
						break
					}
				}
			}
			if ents, err := os.ReadDir(p.dir); err == nil {
				p.named.Add(int64(len(ents)))
			}
		}
		if next != nil {
			return next(s)
		}
		return nil
	}
}

// open returns the descriptors of this process (the workers run in the test
// process) open on spill files of the probe's directory.
func (p *spillProbe) open() ([]string, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		if strings.HasPrefix(target, p.dir+"/synchro-txn-") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// truncateAll empties every spill file of the probe's directory the process
// holds open, as a failing disk could, and returns how many it emptied. Each is
// reopened through /proc and checked to still be a spill file of this
// directory before it is truncated (descriptor numbers are reused).
func (p *spillProbe) truncateAll() int {
	fds, err := p.open()
	if err != nil {
		return 0
	}
	n := 0
	for _, fd := range fds {
		f, err := os.OpenFile("/proc/self/fd/"+fd, os.O_WRONLY, 0)
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
		if err == nil && strings.HasPrefix(target, p.dir+"/synchro-txn-") && f.Truncate(0) == nil {
			n++
		}
		f.Close()
	}
	return n
}

// makeReadOnly replaces every spill file descriptor of the probe's directory
// with a read-only descriptor of the same file (dup3), so that the worker's
// next write to it fails, as on a disk that turned read-only. It must run on
// the stream goroutine (an AfterStep hook): only that goroutine closes spill
// files, so the descriptors listed stay the worker's until it returns.
func (p *spillProbe) makeReadOnly() int {
	fds, err := p.open()
	if err != nil {
		return 0
	}
	n := 0
	for _, fd := range fds {
		num, err := strconv.Atoi(fd)
		if err != nil {
			continue
		}
		ro, err := syscall.Open("/proc/self/fd/"+fd, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(ro))
		if err == nil && strings.HasPrefix(target, p.dir+"/synchro-txn-") && syscall.Dup3(ro, num, syscall.O_CLOEXEC) == nil {
			n++
		}
		syscall.Close(ro)
	}
	return n
}

// requireSpillReleased waits until no spill file of the probe's directory is
// open, and asserts that none was ever seen by name.
func requireSpillReleased(t *testing.T, p *spillProbe) {
	t.Helper()
	waitFor(t, "spill files closed", 10*time.Second, func() (bool, error) {
		fds, err := p.open()
		return len(fds) == 0, err
	})
	requireSpillDirEmpty(t, p)
}

// requireSpillClosedNow asserts that no spill file is open at this moment
// (after a worker's Run returned: nothing may be left to a finalizer).
func requireSpillClosedNow(t *testing.T, p *spillProbe) {
	t.Helper()
	fds, err := p.open()
	if err != nil {
		t.Fatal(err)
	}
	if len(fds) != 0 {
		t.Fatalf("%d spill files still open after the worker stopped", len(fds))
	}
	requireSpillDirEmpty(t, p)
}

func requireSpillDirEmpty(t *testing.T, p *spillProbe) {
	t.Helper()
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 || p.named.Load() != 0 {
		t.Fatalf("spill directory holds %d entries now, %d seen while batches were received; want none", len(ents), p.named.Load())
	}
}

// requireSpilled asserts that a batch was received while at least n spill
// files were open: the case really spilled.
func requireSpilled(t *testing.T, p *spillProbe, n int64) {
	t.Helper()
	if got := p.most.Load(); got < n {
		t.Fatalf("at most %d spill files were open when a batch was received, want at least %d: the workload did not spill", got, n)
	}
}

// requireLedgerXids asserts one ledger row per committed transaction, in commit order.
func requireLedgerXids(t *testing.T, d *testdb.DB, cs []committed) {
	t.Helper()
	var want []string
	for _, c := range cs {
		want = append(want, fmt.Sprint(c.xid))
	}
	if got := rowsOf(t, d, `SELECT xid FROM synchro.txn_ledger ORDER BY commit_lsn`); !slices.Equal(got, want) {
		t.Fatalf("txn_ledger xids %v, want one row per source transaction %v", got, want)
	}
}

// spillSetup: app.big (id, body out of line, v; key guard off so updates send
// partial images) and app.docs (id, owner, note) scoped by owner.
func spillSetup(t *testing.T, d *testdb.DB) {
	t.Helper()
	partialImageTable(t, d)
	d.Exec(t, `CREATE TABLE app.docs (id int PRIMARY KEY, owner text, note text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner}"}')`)
}

const spillTxns = 12

// spillTxn is transaction i of the spill workload. From the second on, each
// starts with a partial update held in memory, crosses the 2 kB threshold with
// a padding row, then (spilled) updates rows partially, moves a doc between
// scopes, deletes the previous padding row, every third deletes and re-inserts a
// row and updates it partially, and every fourth rewrites a body.
func spillTxn(i int) string {
	if i == 0 {
		return `INSERT INTO app.big SELECT g, repeat(chr(96 + g), 4000), 'a' FROM generate_series(1, 4) g;
			INSERT INTO app.docs SELECT g, 'u' || g % 3, repeat('n', 300) FROM generate_series(1, 10) g`
	}
	a, b, c, e := 1+i%4, 1+(i+1)%4, 1+(i+2)%4, 1+(i+3)%4
	sql := fmt.Sprintf(`UPDATE app.big SET v = 'p%[1]d' WHERE id = %[2]d;
		INSERT INTO app.big VALUES (%[3]d, repeat('z%[1]d', 1500), 'pad');
		UPDATE app.big SET v = 'q%[1]d' WHERE id = %[4]d;
		UPDATE app.big SET v = 'r%[1]d' WHERE id = %[2]d;
		UPDATE app.docs SET owner = 'u' || (%[1]d %% 3), note = 'm%[1]d' WHERE id = %[5]d;`, i, a, 100+i, b, 1+i%10)
	if i > 1 {
		sql += fmt.Sprintf(`DELETE FROM app.big WHERE id = %d;`, 100+i-1)
	}
	if i%3 == 0 {
		sql += fmt.Sprintf(`DELETE FROM app.big WHERE id = %[2]d;
			INSERT INTO app.big VALUES (%[2]d, repeat('n%[1]d', 2500), 'reborn');
			UPDATE app.big SET v = 'after%[1]d' WHERE id = %[2]d;`, i, c)
	}
	if i%4 == 1 {
		sql += fmt.Sprintf(`UPDATE app.big SET body = repeat('b%[1]d', 1500) WHERE id = %[2]d;
			UPDATE app.big SET v = 's%[1]d' WHERE id = %[2]d;`, i, e)
	}
	return sql
}

func spillWorkload() []string {
	var out []string
	for i := range spillTxns {
		out = append(out, spillTxn(i))
	}
	return out
}

// spillReference materializes workload without spilling (the production
// threshold, far above any of its transactions), one transaction at a time,
// and returns the materialized state. It also checks that pgoutput really left
// unchanged bodies out of at least minPartial updates.
func spillReference(t *testing.T, setup func(*testing.T, *testdb.DB), workload []string, minPartial int) map[string][]string {
	t.Helper()
	ref := testdb.New(t)
	setup(t, ref)
	cfg := workerConfig(ref, "ref")
	cfg.SpillBytes = wal.DefaultSpillBytes
	p := spillTo(t, &cfg)
	w := startStreaming(t, ref, cfg)
	peek := ref.CreateSlot(t)
	commitEach(t, ref, workload)
	waitMaterialized(t, ref)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := p.most.Load(); got != 0 {
		t.Fatalf("the reference run spilled (%d files open)", got)
	}
	unchanged := 0
	for _, txn := range ref.Decode(t, peek) {
		for _, ev := range txn.Rows {
			if c, ok := ev.Value("body"); ok && c.Unchanged {
				unchanged++
			}
		}
	}
	if unchanged < minPartial {
		t.Fatalf("pgoutput sent %d partial images, want at least %d", unchanged, minPartial)
	}
	return materializedState(t, ref)
}

// spillMode is how a run's transactions reach the worker: live (the worker
// streams while they are written), batch (written while it is stopped, then
// one batch), pipelined (written while it is stopped, then full batches of
// three, each materialized while the next is received).
type spillMode string

const (
	spillLive      spillMode = "live"
	spillBatch     spillMode = "batch"
	spillPipelined spillMode = "pipelined"
)

// batchConfig sets cfg up for mode.
func batchConfig(cfg *wal.Config, mode spillMode) {
	switch mode {
	case spillBatch:
		// Long enough for the WAL sender to deliver the whole backlog on a
		// loaded host: a batch split early holds fewer spilled transactions.
		cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 3*time.Second, -1, 1000
	case spillPipelined:
		cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 2*time.Second, -1, 3
	}
}

// runSpilling materializes workload on a new database with the spill
// threshold spillBytes, delivered by mode, and returns the database, its
// probe and the committed transactions.
func runSpilling(t *testing.T, setup func(*testing.T, *testdb.DB), workload []string, spillBytes int64, mode spillMode) (*testdb.DB, *spillProbe, []committed) {
	t.Helper()
	d := testdb.New(t)
	setup(t, d)
	cfg := workerConfig(d, "spilling")
	cfg.SpillBytes = spillBytes
	p := spillTo(t, &cfg)
	var cs []committed
	if mode == spillLive {
		startStreaming(t, d, cfg)
		cs = commitEach(t, d, workload)
	} else {
		startStreaming(t, d, cfg).stop(t)
		cs = commitEach(t, d, workload)
		batchConfig(&cfg, mode)
		startWorker(t, d, cfg)
	}
	waitMaterialized(t, d)
	return d, p, cs
}

// TestSpillAuditSameAsInMemory: the spill workload (partial images before and
// after the threshold, within a transaction and across spilled transactions of
// one batch, deletes and re-inserts, scope moves) materializes to exactly the
// state of a run that never spills, whether everything spills (SpillBytes 1)
// or only past 2 kB, live, in one batch or pipelined; every spill file is
// closed afterwards and none is ever visible by name.
func TestSpillAuditSameAsInMemory(t *testing.T) {
	t.Parallel()
	workload := spillWorkload()
	want := spillReference(t, spillSetup, workload, 20)
	for _, tc := range []struct {
		name       string
		spillBytes int64
		mode       spillMode
		minOpen    int64 // spill files open at some StepReceived
	}{
		{"threshold_2k_live", testSpillBytes, spillLive, 1},
		{"threshold_2k_one_batch", testSpillBytes, spillBatch, spillTxns - 1},
		{"threshold_2k_pipelined", testSpillBytes, spillPipelined, 3},
		{"threshold_1_one_batch", 1, spillBatch, spillTxns},
		{"threshold_1_live", 1, spillLive, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, p, cs := runSpilling(t, spillSetup, workload, tc.spillBytes, tc.mode)
			requireLedgerXids(t, d, cs)
			if tc.mode == spillBatch {
				if n := queryInt(t, d, `SELECT count(DISTINCT xmin::text) FROM synchro.txn_ledger`); n != 1 {
					t.Fatalf("the workload materialized in %d batches, want one", n)
				}
			}
			requireSameState(t, "spilling vs in-memory run", want, materializedState(t, d))
			requireBodiesKept(t, d)
			requireSpilled(t, p, tc.minOpen)
			requireSpillReleased(t, p)
		})
	}
}

// edgeSetup adds to partialImageTable a registered table of a key column only.
func edgeSetup(t *testing.T, d *testdb.DB) {
	t.Helper()
	partialImageTable(t, d)
	d.Exec(t, `CREATE TABLE app.keys (id int PRIMARY KEY);
		SELECT synchro.register_table('app.keys', '{"kind":"shared","scope":"all"}')`)
}

// edgeWorkload: a transaction whose first event alone passes the threshold;
// one of only deletes (key tuples); key-only rows deleted and re-inserted past
// the threshold; one row updated 80 times (all partial images); no-op updates
// that leave the body out; a row deleted and re-inserted then updated partially;
// spilled writes in a rolled-back and a released subtransaction.
func edgeWorkload() []string {
	var many strings.Builder
	for k := range 80 {
		fmt.Fprintf(&many, "UPDATE app.big SET v = 'n%d' WHERE id = 1;\n", k)
	}
	return []string{
		`INSERT INTO app.big VALUES (1, repeat('f', 10000), 'first')`,
		`INSERT INTO app.big SELECT g, repeat('g', 100), 'x' FROM generate_series(2, 60) g;
		 INSERT INTO app.keys SELECT generate_series(1, 300)`,
		`DELETE FROM app.big WHERE id BETWEEN 2 AND 60; DELETE FROM app.keys WHERE id <= 300`,
		`INSERT INTO app.keys SELECT generate_series(1, 300); DELETE FROM app.keys WHERE id % 2 = 0;
		 INSERT INTO app.keys SELECT generate_series(2, 300, 2)`,
		many.String(),
		`UPDATE app.big SET v = v WHERE id = 1; UPDATE app.big SET body = body WHERE id = 1;
		 INSERT INTO app.keys VALUES (1000)`,
		`DELETE FROM app.big WHERE id = 1; INSERT INTO app.big VALUES (1, repeat('h', 9000), 'again');
		 UPDATE app.big SET v = 'final' WHERE id = 1; INSERT INTO app.big VALUES (2, repeat('i', 3000), 'two');
		 UPDATE app.big SET v = 'last' WHERE id = 1`,
		`INSERT INTO app.keys VALUES (2000); SAVEPOINT s;
		 INSERT INTO app.big VALUES (3, repeat('r', 5000), 'rolled back'); UPDATE app.big SET v = 'rolled back' WHERE id = 1;
		 ROLLBACK TO s; INSERT INTO app.big VALUES (4, repeat('k', 5000), 'kept'); SAVEPOINT s2;
		 UPDATE app.big SET v = 'sub' WHERE id = 4; UPDATE app.big SET v = 'sub' WHERE id = 1; RELEASE s2`,
	}
}

// TestSpillAuditThresholdEdges: the threshold's edges (every event spilled,
// the first event alone past it, transactions of deletes or key-only rows, a
// row updated many times past it, no-op updates) materialize as without spilling.
func TestSpillAuditThresholdEdges(t *testing.T) {
	t.Parallel()
	workload := edgeWorkload()
	want := spillReference(t, edgeSetup, workload, 80)
	for _, tc := range []struct {
		name       string
		spillBytes int64
		mode       spillMode
		minOpen    int64
	}{
		{"threshold_1_live", 1, spillLive, 1},
		{"threshold_1_one_batch", 1, spillBatch, int64(len(workload))},
		{"threshold_2k_one_batch", testSpillBytes, spillBatch, 5},
		{"threshold_2k_pipelined", testSpillBytes, spillPipelined, 2},
		{"threshold_just_below_first_event", 9999, spillBatch, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, p, cs := runSpilling(t, edgeSetup, workload, tc.spillBytes, tc.mode)
			requireLedgerXids(t, d, cs)
			requireSameState(t, "spilling vs in-memory run", want, materializedState(t, d))
			requireBodiesKept(t, d)
			if bad := rowsOf(t, d, `SELECT b.id FROM app.big b
				LEFT JOIN synchro.projection p ON p.key = b.id::text AND p.relation_id = (SELECT relation_id FROM synchro.relation WHERE relation_oid = 'app.big'::regclass)
				WHERE p.image IS DISTINCT FROM to_jsonb(b)`); len(bad) != 0 {
				t.Fatalf("rows %v of app.big are not projected as they are", bad)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.synced_row WHERE table_id = $1`, tableID(t, d, "keys")); n != 302 {
				t.Fatalf("%d current rows of app.keys, want 302", n)
			}
			requireSpilled(t, p, tc.minOpen)
			requireSpillReleased(t, p)
		})
	}
}

// TestSpillAuditCrashWindows stops the worker at each step between its durable
// steps while spilled transactions are in flight (one batch, pipelined
// batches of three, or live), then lets a fresh worker finish. The spill files
// of the stopped worker are closed when Run returns, and the result equals the
// run that never spilled: one ledger row per transaction, the same effects,
// edges, digests, versions and complete images.
func TestSpillAuditCrashWindows(t *testing.T) {
	t.Parallel()
	workload := spillWorkload()
	want := spillReference(t, spillSetup, workload, 20)
	for _, tc := range []struct {
		name   string
		step   wal.Step
		mode   spillMode
		fireAt int64 // the occurrence of step that stops the worker
	}{
		{"received_pipelined", wal.StepReceived, spillPipelined, 2},
		{"materialized_pipelined", wal.StepMaterialized, spillPipelined, 2},
		{"slot_advanced_pipelined", wal.StepSlotAdvanced, spillPipelined, 2},
		{"acknowledged_pipelined", wal.StepAcknowledged, spillPipelined, 2},
		{"received_one_batch", wal.StepReceived, spillBatch, 1},
		{"materialized_one_batch", wal.StepMaterialized, spillBatch, 1},
		{"slot_advanced_one_batch", wal.StepSlotAdvanced, spillBatch, 1},
		{"materialized_live", wal.StepMaterialized, spillLive, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			spillSetup(t, d)
			cfg := workerConfig(d, "crashing")
			p := spillTo(t, &cfg)
			batchConfig(&cfg, tc.mode)
			var seen atomic.Int64
			var openAtCrash atomic.Int64
			crashCfg := cfg
			crashCfg.AfterStep = p.hook(func(s wal.Step) error {
				if s != tc.step || seen.Add(1) != tc.fireAt {
					return nil
				}
				fds, _ := p.open()
				openAtCrash.Store(int64(len(fds)))
				return errors.New("simulated crash")
			})
			var cs []committed
			if tc.mode == spillLive {
				w := startStreaming(t, d, crashCfg)
				// The first transaction materialized on its own, so that a later
				// batch exists for the crash to hit however fast the rest arrives.
				cs = commitEach(t, d, workload[:1])
				waitMaterialized(t, d)
				cs = append(cs, commitEach(t, d, workload[1:])...)
				if err := w.waitExit(t, 30*time.Second); !errors.Is(err, wal.ErrStopped) {
					t.Fatalf("crashing worker returned %v, want wal.ErrStopped", err)
				}
			} else {
				startStreaming(t, d, cfg).stop(t)
				cs = commitEach(t, d, workload)
				w := startWorker(t, d, crashCfg)
				if err := w.waitExit(t, 30*time.Second); !errors.Is(err, wal.ErrStopped) {
					t.Fatalf("crashing worker returned %v, want wal.ErrStopped", err)
				}
			}
			t.Logf("spill files open at the crash: %d; ledger rows: %d", openAtCrash.Load(), queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger`))
			if tc.mode != spillLive && openAtCrash.Load() == 0 {
				t.Fatalf("no spill file was open at the crash: the crash hit no spilled transaction")
			}
			requireSpillClosedNow(t, p)

			startWorker(t, d, cfg)
			waitMaterialized(t, d)
			requireLedgerXids(t, d, cs)
			if dup := rowsOf(t, d, `SELECT scope, table_id, key, version, count(*) FROM synchro.effect
				GROUP BY scope, table_id, key, version HAVING count(*) > 1`); len(dup) > 0 {
				t.Fatalf("duplicate effects: %v", dup)
			}
			requireSameState(t, "crash with spilling vs in-memory run", want, materializedState(t, d))
			requireBodiesKept(t, d)
			requireProgressOrdering(t, d, cfg.Slot)
			requireSpillReleased(t, p)
		})
	}
}

// TestSpillAuditUnregisteredColumnsChangeMidTransaction: unregistered columns
// added and dropped in the middle of spilled transactions change the relation
// message between spilled events of one transaction. Each spilled event must
// decode under the relation message it arrived with, partial images complete
// across the changes (within the transaction, over an earlier spilled
// transaction of the batch, and over the projection), nothing is quarantined
// and the state equals a run without spilling.
func TestSpillAuditUnregisteredColumnsChangeMidTransaction(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, d *testdb.DB) {
		t.Helper()
		partialImageTable(t, d)
		d.Exec(t, `ALTER TABLE app.big ADD COLUMN junk text`)
	}
	txns := []string{
		`INSERT INTO app.big SELECT g, repeat(chr(96 + g), 3000), 'a', 'j' FROM generate_series(1, 3) g;
		 UPDATE app.big SET v = 'b' WHERE id = 1;
		 ALTER TABLE app.big ADD COLUMN extra int DEFAULT 7;
		 UPDATE app.big SET v = 'c' WHERE id = 2;
		 UPDATE app.big SET v = 'z' WHERE id = 10;
		 ALTER TABLE app.big DROP COLUMN junk;
		 INSERT INTO app.big VALUES (4, repeat('d', 3000), 'd', 8);
		 UPDATE app.big SET v = 'e' WHERE id = 1;
		 UPDATE app.big SET extra = 9 WHERE id = 3`,
		`INSERT INTO app.big VALUES (20, repeat('p', 3000), 'p', 1);
		 UPDATE app.big SET v = 'f' WHERE id = 1;
		 ALTER TABLE app.big ADD COLUMN more text;
		 UPDATE app.big SET v = 'g' WHERE id = 4;
		 UPDATE app.big SET v = 'h', more = 'm' WHERE id = 2;
		 UPDATE app.big SET v = 'y' WHERE id = 10`,
	}
	run := func(t *testing.T, spillBytes int64) (*testdb.DB, *spillProbe, []committed) {
		t.Helper()
		d := testdb.New(t)
		setup(t, d)
		cfg := workerConfig(d, "w1")
		cfg.SpillBytes = spillBytes
		p := spillTo(t, &cfg)
		w := startStreaming(t, d, cfg)
		peek := d.CreateSlot(t)
		first := commitTxn(t, d, `INSERT INTO app.big VALUES (10, repeat('t', 5000), 'a', 'j')`)
		waitMaterialized(t, d)
		w.stop(t)
		cs := []committed{first}
		for _, sql := range txns {
			cs = append(cs, commitTxn(t, d, sql))
		}
		// The relation message changed between the row events of the first
		// transaction: its tuples come with 4, 5 and 4 columns.
		var widths []int
		for _, ev := range decodedTxn(t, d.Decode(t, peek), cs[1].xid).Rows {
			if len(widths) == 0 || widths[len(widths)-1] != len(ev.New) {
				widths = append(widths, len(ev.New))
			}
		}
		if !slices.Equal(widths, []int{4, 5, 4}) {
			t.Fatalf("tuple widths in source order %v, want 4, 5, 4", widths)
		}
		batchConfig(&cfg, spillBatch)
		startWorker(t, d, cfg)
		waitMaterialized(t, d)
		return d, p, cs
	}
	ref, _, _ := run(t, wal.DefaultSpillBytes)
	want := materializedState(t, ref)
	d, p, cs := run(t, testSpillBytes)
	requireLedgerXids(t, d, cs)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("%d poison records: changes of unregistered columns are no drift", n)
	}
	requireSameState(t, "spilling vs in-memory run", want, materializedState(t, d))
	if bad := rowsOf(t, d, `SELECT b.id FROM app.big b
		LEFT JOIN synchro.projection p ON p.key = b.id::text
		WHERE p.image IS DISTINCT FROM jsonb_build_object('id', b.id, 'body', b.body, 'v', b.v)`); len(bad) != 0 {
		t.Fatalf("rows %v are not projected with their registered columns as they are", bad)
	}
	requireBodiesKept(t, d)
	requireSpilled(t, p, 2)
	requireSpillReleased(t, p)
}

// TestSpillAuditDriftInSpilledEvents: a registered column's type changed,
// renamed or dropped in the middle of a transaction, so that the drift shows
// only in events past the spill threshold (decoded when the transaction is
// prepared): the stream blocks at that transaction with one redacted
// relation_drift record naming the relation, nothing of it or after it is
// materialized, and the outcome is the same without spilling.
func TestSpillAuditDriftInSpilledEvents(t *testing.T) {
	t.Parallel()
	const pad = `INSERT INTO app.other SELECT g, repeat('SECRET-123', 20) FROM generate_series(10, 40) g;`
	for _, tc := range []struct{ name, poison, relation string }{
		{"type_change_after_spilled_events", pad + `
			ALTER TABLE app.k ALTER COLUMN q TYPE bigint;
			INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`, "app.k"},
		{"type_change_between_spilled_writes_of_the_table", `
			INSERT INTO app.k SELECT g, 'SECRET-123', g FROM generate_series(10, 80) g;
			ALTER TABLE app.k ALTER COLUMN q TYPE bigint;
			UPDATE app.k SET v = 'SECRET-1234' WHERE id = 10`, "app.k"},
		{"type_changed_and_changed_back", pad + `
			ALTER TABLE app.k ALTER COLUMN q TYPE bigint;
			INSERT INTO app.k VALUES (2, 'SECRET-123', 7);
			ALTER TABLE app.k ALTER COLUMN q TYPE int;
			INSERT INTO app.k VALUES (3, 'SECRET-123', 8)`, "app.k"},
		{"column_renamed_and_renamed_back", pad + `
			ALTER TABLE app.t RENAME COLUMN v TO w;
			UPDATE app.t SET w = 'SECRET-123' WHERE id = 'base';
			ALTER TABLE app.t RENAME COLUMN w TO v;
			UPDATE app.t SET v = 'SECRET-1234' WHERE id = 'base'`, "app.t"},
		{"replica_identity_full_mid_transaction", pad + `
			UPDATE app.t SET v = 'SECRET-123' WHERE id = 'base';
			ALTER TABLE app.t REPLICA IDENTITY FULL;
			UPDATE app.t SET v = 'SECRET-1234' WHERE id = 'base'`, "app.t"},
		{"registered_column_renamed", pad + `
			UPDATE app.t SET v = 'SECRET-123' WHERE id = 'base';
			ALTER TABLE app.t RENAME COLUMN v TO w;
			UPDATE app.t SET w = 'SECRET-1234' WHERE id = 'base'`, "app.t"},
		{"registered_column_dropped", pad + `
			ALTER TABLE app.t DROP COLUMN n;
			INSERT INTO app.t VALUES ('SECRET-k', 'SECRET-123', 'SECRET-a')`, "app.t"},
	} {
		for _, spill := range []struct {
			name  string
			bytes int64
		}{{"spilled", testSpillBytes}, {"in_memory", wal.DefaultSpillBytes}} {
			t.Run(tc.name+"/"+spill.name, func(t *testing.T) {
				t.Parallel()
				d := testdb.New(t)
				d.Exec(t, driftSetup)
				cfg := workerConfig(d, "w1")
				cfg.SpillBytes = spill.bytes
				p := spillTo(t, &cfg)
				log := logTo(&cfg)
				startStreaming(t, d, cfg)
				commitTxn(t, d, driftBase)
				waitMaterialized(t, d)
				bad := commitTxn(t, d, tc.poison)
				later := commitTxn(t, d, driftLater)
				e := &driftEnv{d: d, cfg: cfg, log: log}
				e.requireBlockedBy(t, bad, later, capture.ClassRelationDrift, tc.relation)
				if spill.bytes == testSpillBytes {
					requireSpilled(t, p, 1)
				}
				requireSpillReleased(t, p)
			})
		}
	}
}

// spillPoisonPad makes the poison transactions of TestSpillAuditPoisonInSpilledTransaction spill.
const spillPoisonPad = `INSERT INTO app.other SELECT g, 'SECRET-123' || repeat('x', 300) FROM generate_series(100, 120) g;`

// TestSpillAuditPoisonInSpilledTransaction: a poison event past the spill
// threshold (a TRUNCATE of a registered table at the end, a write after the
// fence trigger was disabled mid-transaction, a malformed fence message, a
// failing scope rule, a cast error quoting the value) blocks the stream with
// one redacted poison record of the same class as without spilling; nothing of
// it or after it is materialized, and the spill files are released.
func TestSpillAuditPoisonInSpilledTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, prepare, poison, class, relation, sqlstate string
	}{
		{name: "truncate_at_end", class: capture.ClassTruncate, relation: "app.t",
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_truncate_guard`,
			poison:  spillPoisonPad + `INSERT INTO app.t VALUES ('SECRET-k1', 'SECRET-123', 'u1'); TRUNCATE app.t`},
		{name: "fence_trigger_disabled_mid_transaction", class: capture.ClassFenceUnmatched, relation: "app.t",
			poison: spillPoisonPad + `INSERT INTO app.t VALUES ('SECRET-k0', 'SECRET-123', 'u1');
				ALTER TABLE app.t DISABLE TRIGGER synchro_fence;
				INSERT INTO app.t VALUES ('SECRET-k2', 'SECRET-123', 'u1')`},
		{name: "fence_tampered", class: capture.ClassFenceMalformed,
			poison: spillPoisonPad + `INSERT INTO app.t VALUES ('SECRET-k3', 'SECRET-123', 'u1');
				SELECT pg_logical_emit_message(true, 'synchro.fence', '{"bad":1}')`},
		{name: "key_change_with_guards_disabled", class: capture.ClassKeyChange, relation: "app.t",
			prepare: `ALTER TABLE app.t DISABLE TRIGGER synchro_key_guard, DISABLE TRIGGER synchro_fence`,
			poison:  spillPoisonPad + `UPDATE app.t SET id = 'SECRET-k5', v = 'SECRET-123' WHERE id = 'base'`},
		{name: "drop_recreate_republished", class: capture.ClassRelationDrift, relation: "app.t",
			poison: spillPoisonPad + `DROP TABLE app.t; CREATE TABLE app.t (id text PRIMARY KEY, v text, owner text);
				ALTER PUBLICATION synchro ADD TABLE app.t;
				INSERT INTO app.t VALUES ('SECRET-k8', 'SECRET-123', 'u1')`},
		{name: "rule_fails", class: capture.ClassMaterialize, sqlstate: "22012", relation: "app.r",
			poison: spillPoisonPad + `INSERT INTO app.r VALUES (2, 'boom')`},
		{name: "rule_cast_quotes_value", class: capture.ClassMaterialize, sqlstate: "22P02", relation: "app.c",
			poison: spillPoisonPad + `INSERT INTO app.c VALUES (1, 'SECRET-123')`},
	} {
		for _, spill := range []struct {
			name  string
			bytes int64
		}{{"spilled", testSpillBytes}, {"in_memory", wal.DefaultSpillBytes}} {
			t.Run(tc.name+"/"+spill.name, func(t *testing.T) {
				t.Parallel()
				d := testdb.New(t)
				d.Exec(t, poisonSetup)
				cfg := workerConfig(d, "w1")
				cfg.SpillBytes = spill.bytes
				p := spillTo(t, &cfg)
				log := logTo(&cfg)
				startStreaming(t, d, cfg)
				commitTxn(t, d, `INSERT INTO app.t VALUES ('base', 'plain', 'u1')`)
				waitMaterialized(t, d)
				if tc.prepare != "" {
					d.Exec(t, tc.prepare)
				}
				bad := commitTxn(t, d, tc.poison)
				later := commitTxn(t, d, `INSERT INTO app.other VALUES (2, 'SECRET-123')`)
				e := &driftEnv{d: d, cfg: cfg, log: log}
				e.requireBlockedBy(t, bad, later, tc.class, tc.relation)
				if got := derefS(readPoison(t, d, bad).sqlstate); got != tc.sqlstate {
					t.Fatalf("poison sqlstate %q, want %q", got, tc.sqlstate)
				}
				// The cast is guarded: the planner may apply it to projection rows
				// of other relations (keyed 'base') before the relation filter.
				if n := queryInt(t, d, `SELECT count(*) FROM synchro.projection p JOIN synchro.relation r USING (relation_id)
					WHERE r.relation_oid = 'app.other'::regclass AND CASE WHEN p.key ~ '^[0-9]+$' THEN p.key::int >= 100 END`); n != 0 {
					t.Fatalf("%d rows of the poison transaction were projected", n)
				}
				if spill.bytes == testSpillBytes {
					requireSpilled(t, p, 1)
				}
				requireSpillReleased(t, p)
			})
		}
	}
}

// TestSpillAuditPoisonRetryAfterRepair: three spilled transactions received
// in one batch, the second failing a scope rule. The batch call fails, the
// retry transaction by transaction (reading the images back from the spill
// files) materializes the first and quarantines the second; a retry without
// repair fails again; after the repair the retry materializes the second and
// third exactly once with the poison's identity and fences, and the state
// equals a run that never spilled nor failed.
func TestSpillAuditPoisonRetryAfterRepair(t *testing.T) {
	t.Parallel()
	const repair = `UPDATE synchro.synced_table SET scope_rule = jsonb_set(scope_rule, '{membership}', '"SELECT ''all''"') WHERE name = 'r'`
	txns := []string{
		`INSERT INTO app.other SELECT g, repeat('SECRET-123', 30) FROM generate_series(1, 20) g;
		 INSERT INTO app.r VALUES (1, 'fine')`,
		`INSERT INTO app.other SELECT g, repeat('SECRET-123', 30) FROM generate_series(21, 40) g;
		 INSERT INTO app.r VALUES (2, 'boom'); INSERT INTO app.t VALUES ('SECRET-k', 'SECRET-123', 'u1');
		 UPDATE app.other SET v = 'SECRET-upd' WHERE id = 1`,
		`INSERT INTO app.other SELECT g, repeat('SECRET-123', 30) FROM generate_series(41, 60) g;
		 UPDATE app.r SET title = 'fine again' WHERE id = 1; UPDATE app.other SET v = 'SECRET-upd2' WHERE id = 21`,
	}

	ref := testdb.New(t)
	ref.Exec(t, poisonSetup)
	ref.Exec(t, repair)
	refCfg := workerConfig(ref, "ref")
	refCfg.SpillBytes = wal.DefaultSpillBytes
	rw := startStreaming(t, ref, refCfg)
	for _, sql := range txns {
		commitTxn(t, ref, sql)
	}
	waitMaterialized(t, ref)
	rw.stop(t)
	want := materializedState(t, ref)

	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	cfg := workerConfig(d, "w1")
	p := spillTo(t, &cfg)
	log := logTo(&cfg)
	startStreaming(t, d, cfg).stop(t)
	cs := commitEach(t, d, txns)
	batchConfig(&cfg, spillBatch)
	startWorker(t, d, cfg)
	waitPoison(t, d)
	waitBlocked(t, d, cfg.WorkerID, 200*time.Millisecond)
	requireSpilled(t, p, 3)
	pr := readPoison(t, d, cs[1])
	if pr.class != capture.ClassMaterialize || derefS(pr.sqlstate) != "22012" || pr.xid != cs[1].xid || !pr.inBounds {
		t.Fatalf("poison record %+v (sqlstate %s), want materialize_error 22012 of xid %d", pr, derefS(pr.sqlstate), cs[1].xid)
	}
	requireMaterializedOnce(t, d, 21, cs[0])
	requireBlockedAt(t, d, cfg.Slot, pr.commitLSN, cs[2])
	requireSpillReleased(t, p)

	// Retry without repair: the same transaction fails again.
	retryUnrepaired(t, d, cfg.WorkerID, pr.id)
	requireBlockedAt(t, d, cfg.Slot, pr.commitLSN, cs[2])
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 1 {
		t.Fatalf("%d poison records after a failed retry, want 1", n)
	}

	d.Exec(t, repair)
	if !queryBool(t, d, `SELECT synchro.retry_poison($1)`, pr.id) {
		t.Fatalf("retry_poison returned false")
	}
	waitMaterialized(t, d)
	commitLSN, endLSN, events, applied := ledgerOf(t, d, cs[1])
	if commitLSN != pr.commitLSN || endLSN != pr.endLSN || events != 23 || applied != 23 {
		t.Fatalf("retried transaction materialized at %s..%s with %d/%d events, want the poison's identity %s..%s with 23/23",
			commitLSN, endLSN, events, applied, pr.commitLSN, pr.endLSN)
	}
	if got := rowsOf(t, d, `SELECT fence_id::text FROM synchro.event_ledger WHERE commit_lsn = $1::pg_lsn ORDER BY event_ordinal`,
		commitLSN); !slices.Equal(got, cs[1].fences) {
		t.Fatalf("event ledger fences %v, want the poisoned transaction's fences %v", got, cs[1].fences)
	}
	requireLedgerXids(t, d, cs)
	requireMaterializedOnce(t, d, 22, cs[2])
	requireSameState(t, "repaired spilled run vs in-memory run", want, materializedState(t, d))
	requireRedacted(t, d, log)
	requireEffectVersions(t, d)
	requireDigests(t, d)
	requireSpillReleased(t, p)
}

// TestSpillAuditRegistryActivation: a table registered in the middle of a
// transaction whose events spill both before and after the activation
// message: events before it use the prior generation (rows of the table
// already in the publication are skipped, not loaded as unfenced rows), later
// ones the new one; the state equals a run without spilling.
func TestSpillAuditRegistryActivation(t *testing.T) {
	t.Parallel()
	txn := `INSERT INTO app.a SELECT g, repeat('p', 300) FROM generate_series(1000, 1010) g;
		INSERT INTO app.b SELECT g, repeat('q', 300) FROM generate_series(500, 510) g;
		` + activationTxn + `;
		INSERT INTO app.a SELECT g, repeat('q', 300) FROM generate_series(2000, 2005) g;
		UPDATE app.b SET v = repeat('r', 300) WHERE id = 2`
	for _, published := range []bool{false, true} {
		setup := func(t *testing.T, d *testdb.DB) {
			t.Helper()
			d.Exec(t, activationSetup)
			if published {
				d.Exec(t, `ALTER PUBLICATION synchro ADD TABLE app.b`)
			}
		}
		t.Run(fmt.Sprintf("published_%v", published), func(t *testing.T) {
			t.Parallel()
			want := spillReference(t, setup, []string{txn}, 0)
			for _, spillBytes := range []int64{1, testSpillBytes} {
				t.Run(fmt.Sprintf("threshold_%d", spillBytes), func(t *testing.T) {
					t.Parallel()
					d, p, cs := runSpilling(t, setup, []string{txn}, spillBytes, spillLive)
					requireLedgerXids(t, d, cs)
					requireSameState(t, "spilling vs in-memory run", want, materializedState(t, d))
					b := tableID(t, d, "b")
					if got := rowsOf(t, d, `SELECT key FROM synchro.synced_row WHERE table_id = $1 ORDER BY key`, b); !slices.Equal(got, []string{"100", "2"}) {
						t.Fatalf("synced rows of b: %v, want 100 and 2 (rows written before the activation are not b's)", got)
					}
					if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
						t.Fatalf("%d poison records", n)
					}
					if got := queryInt(t, d, `SELECT registry_generation FROM synchro.progress`); got != maxGeneration(t, d) {
						t.Fatalf("progress registry_generation %d, want %d", got, maxGeneration(t, d))
					}
					requireSpilled(t, p, 1)
					requireSpillReleased(t, p)
					requireDigests(t, d)
				})
			}
		})
	}
}

// TestSpillAuditReleasesFiles: after many spilled transactions, live and as a
// pipelined backlog (each batch holding its transactions' files until it is
// done), the worker holds no spill file open, none is visible by name, and a
// stopped worker left none open at all.
func TestSpillAuditReleasesFiles(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	p := spillTo(t, &cfg)
	w := startStreaming(t, d, cfg)
	var cs []committed
	write := func(from int) {
		for i := range 30 {
			k := from + i*10
			cs = append(cs, commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs SELECT g, repeat('x', 300) FROM generate_series(%d, %d) g`, k, k+9)))
		}
	}
	write(0)
	waitMaterialized(t, d)
	requireSpilled(t, p, 1)
	requireSpillReleased(t, p)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	requireSpillClosedNow(t, p)

	write(1000)
	cfg.BatchMaxDelay, cfg.BatchQuietGap, cfg.BatchMaxTxns = 2*time.Second, -1, 4
	w = startWorker(t, d, cfg)
	waitMaterialized(t, d)
	requireSpilled(t, p, 4)
	requireSpillReleased(t, p)
	requireLedgerXids(t, d, cs)
	requireMaterializedOnce(t, d, 10, cs...)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	requireSpillClosedNow(t, p)
	requireDigests(t, d)
}

// TestSpillAuditDirRemovedMidSession: the spill directory disappears while
// the worker streams (the root user of the test run ignores directory
// permissions, so a removed directory stands for an unwritable one). The
// next spilling transaction fails the session, which retries without
// quarantining or acknowledging it or anything after it; once the directory
// is back, both are materialized exactly once.
func TestSpillAuditDirRemovedMidSession(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	p := spillTo(t, &cfg)
	logs := logTo(&cfg)
	startStreaming(t, d, cfg)
	first := commitTxn(t, d, `INSERT INTO app.docs SELECT g, repeat('x', 500) FROM generate_series(1, 20) g`)
	waitMaterialized(t, d)
	requireSpilled(t, p, 1)
	requireSpillReleased(t, p)
	if err := os.Remove(p.dir); err != nil {
		t.Fatal(err)
	}
	c := commitTxn(t, d, `INSERT INTO app.docs SELECT g, repeat('y', 500) FROM generate_series(21, 40) g`)
	later := commitTxn(t, d, `INSERT INTO app.docs VALUES (41, 'small')`)
	waitFor(t, "the spill failure logged twice (a retried session)", 30*time.Second, func() (bool, error) {
		return strings.Count(logs.String(), "spill file: create") >= 2, nil
	})
	waitState(t, d, cfg.WorkerID, "retrying")
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("a spill failure quarantined %d transactions", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = ANY ($1)`, []int64{c.xid, later.xid}); n != 0 {
		t.Fatalf("%d transactions materialized past the spill failure", n)
	}
	// The acknowledgement and the slot may pass c.before (an idle
	// acknowledgement to a flush position read while c was being written),
	// never c's commit: checked against the commit LSN c is materialized at.
	acked := queryText(t, d, `SELECT greatest(coalesce(p.acknowledged_end_lsn, p.generation_start_lsn), s.confirmed_flush_lsn)::text
		FROM synchro.progress p JOIN pg_replication_slots s ON s.slot_name = $1`, cfg.Slot)
	if err := os.Mkdir(p.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 20, first, c)
	if !queryBool(t, d, `SELECT $1::pg_lsn < commit_lsn FROM synchro.txn_ledger WHERE xid = $2`, acked, c.xid) {
		t.Fatalf("acknowledged %s, past the commit of the transaction that could not spill (%s)", acked,
			queryText(t, d, `SELECT commit_lsn::text FROM synchro.txn_ledger WHERE xid = $1`, c.xid))
	}
	requireMaterializedOnce(t, d, 1, later)
	requireDigests(t, d)
	requireSpillReleased(t, p)
}

// TestSpillAuditFileDamagedUnderWorker: spill files emptied under the worker
// (as a failing disk could) once a batch was prepared (StepReceived: the COPY
// then cannot read the images back), or once a batch was materialized while
// the next ones are received, loaded or copied (pipelined). The worker's own
// trouble fails the session, never quarantines; the retried session
// materializes everything exactly once, to the state of a run that never spilled.
func TestSpillAuditFileDamagedUnderWorker(t *testing.T) {
	t.Parallel()
	workload := spillWorkload()
	want := spillReference(t, spillSetup, workload, 20)
	for _, tc := range []struct {
		name       string
		step       wal.Step
		mode       spillMode
		mustFail   bool // the damage surely fails a session
		damageOnce bool
	}{
		{"emptied_before_copy_one_batch", wal.StepReceived, spillBatch, true, true},
		{"emptied_before_copy_pipelined", wal.StepReceived, spillPipelined, true, true},
		{"emptied_after_materialized_pipelined", wal.StepMaterialized, spillPipelined, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			spillSetup(t, d)
			cfg := workerConfig(d, "damaged")
			p := spillTo(t, &cfg)
			logs := logTo(&cfg)
			startStreaming(t, d, cfg).stop(t)
			cs := commitEach(t, d, workload)
			batchConfig(&cfg, tc.mode)
			var damaged, occurrences atomic.Int64
			cfg.AfterStep = p.hook(func(s wal.Step) error {
				if s != tc.step || occurrences.Add(1) > 3 || (tc.damageOnce && damaged.Load() > 0) {
					return nil
				}
				damaged.Add(int64(p.truncateAll()))
				return nil
			})
			startWorker(t, d, cfg)
			waitMaterialized(t, d)
			failed := strings.Count(logs.String(), "worker session failed")
			t.Logf("spill files damaged: %d; failed sessions: %d (write failures %d, read failures %d)", damaged.Load(), failed,
				strings.Count(logs.String(), "spill file: write"), strings.Count(logs.String(), "spill file: read"))
			if damaged.Load() == 0 {
				t.Fatalf("no spill file was open to damage")
			}
			if tc.mustFail && (failed == 0 || !strings.Contains(logs.String(), "spill file")) {
				t.Fatalf("damaged spill files failed no session with a spill error; log:\n%s", logs)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
				t.Fatalf("damaged spill files quarantined %d transactions: %s", n,
					queryText(t, d, `SELECT string_agg(p::text, ', ') FROM synchro.poison_txn p`))
			}
			requireLedgerXids(t, d, cs)
			requireSameState(t, "damaged spill files vs in-memory run", want, materializedState(t, d))
			requireBodiesKept(t, d)
			requireSpillReleased(t, p)
		})
	}
}

// TestSpillAuditWriteFailsMidTransaction: the disk under the spill files turns
// read-only while a large transaction is being received and spilled. The
// batch before it is held in materialization (the test locks the ledger)
// until the large transaction's spill file is growing; when that batch
// completes (StepMaterialized, while the large transaction still streams in)
// the hook makes every open spill file read-only. The failed write ends the
// session without quarantining anything; the next session materializes every
// transaction exactly once.
func TestSpillAuditWriteFailsMidTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "w1")
	p := spillTo(t, &cfg)
	logs := logTo(&cfg)
	startStreaming(t, d, cfg).stop(t)
	small := commitTxn(t, d, `INSERT INTO app.docs SELECT g, repeat('s', 100) FROM generate_series(1, 50) g`)
	large := commitTxn(t, d, `INSERT INTO app.docs SELECT g, repeat('l', 50) FROM generate_series(1000, 20999) g`)
	later := commitTxn(t, d, `INSERT INTO app.docs VALUES (90000, 'later')`)

	ctx := context.Background()
	lock, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck // released below; a no-op then
	if _, err := lock.Exec(ctx, `LOCK TABLE synchro.txn_ledger IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var damaged atomic.Int64
	cfg.BatchMaxTxns = 1 // every transaction is a full batch: materialized while the next is received
	cfg.AfterStep = p.hook(func(s wal.Step) error {
		if s == wal.StepMaterialized && damaged.Load() == 0 {
			damaged.Add(int64(p.makeReadOnly()))
		}
		return nil
	})
	startWorker(t, d, cfg)
	waitFor(t, "the large transaction spilling", 30*time.Second, func() (bool, error) {
		fds, err := p.open()
		for _, fd := range fds {
			if st, err := os.Stat("/proc/self/fd/" + fd); err == nil && st.Size() > 128<<10 {
				return true, nil
			}
		}
		return false, err
	})
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitMaterialized(t, d)
	t.Logf("spill files made read-only: %d", damaged.Load())
	if !strings.Contains(logs.String(), "spill file: write") {
		t.Fatalf("no spill write failed: the large transaction was not being spilled when the disk turned read-only; log:\n%s", logs)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("a failed spill write quarantined %d transactions", n)
	}
	requireLedgerXids(t, d, []committed{small, large, later})
	requireMaterializedOnce(t, d, 50, small)
	requireMaterializedOnce(t, d, 20000, large)
	requireMaterializedOnce(t, d, 1, later)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.projection WHERE image ->> 'v' = repeat('l', 50)`); n != 20000 {
		t.Fatalf("%d rows of the large transaction projected, want 20000", n)
	}
	requireDigests(t, d)
	requireSpillReleased(t, p)
}
