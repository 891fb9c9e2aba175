package capture

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/dberr"
)

// Materializer materializes prepared transactions over one connection of its
// own, so that its cached plans and scratch tables serve every batch, into the
// active stream or (staged valid) into the stage of the reset whose target
// generation staged is.
type Materializer struct {
	conn   *pgxpool.Conn
	staged pgtype.UUID
}

// NewMaterializer acquires and sets up the materialization connection; Close
// lets go of it.
func NewMaterializer(ctx context.Context, pool *pgxpool.Pool, staged pgtype.UUID) (*Materializer, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// PostgreSQL runs a statement to its end after its client died unless told
	// to check: a backlog batch of a killed worker would hold the progress row,
	// and keep the worker that takes over waiting, until it finished. Timeouts
	// and a default isolation set for the database's sessions are meant for
	// applications: materialization waits for the locks it needs, takes as long
	// as a batch takes (a batch cancelled by statement_timeout would be received
	// and cancelled again), and reads each statement under a fresh snapshot
	// (synchro.await_visible waits for decoded transactions to become visible).
	if err := db.New(conn).SetupMaterialization(ctx); err != nil {
		conn.Release()
		return nil, err
	}
	return &Materializer{conn: conn, staged: staged}, nil
}

// Close releases the materialization connection.
func (m *Materializer) Close() { m.conn.Release() }

// MaterializeFailure is the materialization failure of one transaction: its
// poison record's failure and SQLSTATE.
type MaterializeFailure struct {
	Failure  *Failure
	SQLState string
}

// Materialize runs one materialization call for the whole batch; when it fails
// it retries transaction by transaction so the earlier ones commit and exactly
// the failing one is reported, with the relation its failure is recorded
// against. It returns how many leading transactions are durable. An error is a
// transient one (dberr): the session restarts and the batch is tried again.
func (m *Materializer) Materialize(ctx context.Context, txns []Prepared) (int, *MaterializeFailure, error) {
	if len(txns) == 0 {
		return 0, nil, nil
	}
	err := m.call(ctx, txns, true)
	if err == nil {
		return len(txns), nil, nil
	}
	if !poisonable(err) {
		return 0, nil, err
	}
	for i := range txns {
		if err := m.call(ctx, txns[i:i+1], true); err != nil {
			if !poisonable(err) {
				return i, nil, err
			}
			code := dberr.SQLState(err)
			rel, err := m.failingRelation(ctx, txns[i], code)
			if err != nil {
				return i, nil, err
			}
			f := &MaterializeFailure{Failure: &Failure{Class: ClassMaterialize, Detail: "materialization failed",
				RelationID: rel}, SQLState: code}
			return i, f, nil
		}
	}
	return len(txns), nil, nil
}

// failingRelation names the registered relation that txn's failed
// materialization (SQLSTATE sqlstate) is recorded against. The failure comes
// from set-based statements over all of the transaction's events, so it is
// found by attempts that are always rolled back: the transaction's relations,
// in the order it first changed them, are added one at a time, and the
// relation named is one whose events turn a passing attempt into one failing
// with the same SQLSTATE (binary search over those prefixes: a few attempts
// even for a transaction changing many relations). A transaction changing one
// relation names it after a single attempt without events; 0 (none) when the
// failure does not need any event.
func (m *Materializer) failingRelation(ctx context.Context, txn Prepared, sqlstate string) (int64, error) {
	var order []int64
	rank := map[int64]int{} // a relation's place in order
	for _, e := range txn.Events {
		if _, ok := rank[e.RelationID]; !ok {
			rank[e.RelationID] = len(order)
			order = append(order, e.RelationID)
		}
	}
	// fails reports whether the events of the first k relations fail alone.
	fails := func(k int) (bool, error) {
		sub := txn
		sub.Events = nil
		for _, e := range txn.Events {
			if rank[e.RelationID] < k {
				sub.Events = append(sub.Events, e)
			}
		}
		sub.Applied = len(sub.Events)
		err := m.call(ctx, []Prepared{sub}, false)
		switch {
		case err == nil:
			return false, nil
		case !poisonable(err):
			return false, err
		default:
			return dberr.SQLState(err) == sqlstate, nil
		}
	}
	if len(order) == 0 {
		return 0, nil
	}
	if f, err := fails(0); f || err != nil {
		return 0, err
	}
	lo, hi := 0, len(order) // the first lo relations pass, the first hi fail
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		f, err := fails(mid)
		if err != nil {
			return 0, err
		}
		if f {
			hi = mid
		} else {
			lo = mid
		}
	}
	return order[hi-1], nil
}

// call materializes txns in one database transaction: the scratch tables are
// made current (synchro.materialize_scratch, the one place that creates them),
// the events are copied into synchro_seg_event, then one call materializes the
// batch, which commits whole or not at all (or, unless commit, is rolled back
// whatever happens: an attempt). No single value holds the events, so a source
// transaction of any size fits.
func (m *Materializer) call(ctx context.Context, txns []Prepared, commit bool) error {
	body := batchJSON(txns)
	tx, err := m.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit; after a failure the session's next statement reports the connection's state
	q := db.New(tx)
	if err := q.MaterializeScratch(ctx); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", "synchro_seg_event"}, eventColumns, &eventRows{txns: txns}); err != nil {
		return err
	}
	if err := q.MaterializeTransaction(ctx, db.MaterializeTransactionParams{Batch: body, Staged: m.staged}); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// poisonable tells a failure of the transaction itself (a permanent or poison
// error: it fails again) from a transient one, which only restarts the
// session: a retry of the same transaction may pass.
func poisonable(err error) bool { return dberr.Classify(err) != dberr.Transient }
