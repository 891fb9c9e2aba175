package wal

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro-sync/synchro/internal/db"
)

// ensureStream starts the first stream generation when there is none: the slot
// (--slot) is created and its consistent point becomes generation_start. A slot
// left by a start that never recorded progress holds no durable work and is
// replaced. Once a stream exists its record (synchro.progress) names the active
// slot, the durable pointer that only a stream reset's activation switches:
// each session streams the slot it names, whatever --slot says.
func (w *Worker) ensureStream(ctx context.Context, repl *pgconn.PgConn) error {
	q := db.New(w.pool)
	active, err := q.GetActiveSlot(ctx)
	switch {
	case err == nil:
		if active != w.getSlot() {
			w.cfg.Log.Info("streaming the active slot", "worker", w.cfg.WorkerID, "slot", active, "flag_slot", w.cfg.Slot)
		}
		w.setSlot(active)
		return nil
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	if _, err := w.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
		WHERE slot_name = $1 AND database = current_database() AND NOT active`, w.cfg.Slot); err != nil {
		return err
	}
	// Slot names are cluster-wide: another database's stream (a second Synchro
	// database on the cluster, say) may hold this one. Creating it would fail on
	// every session with "already exists", which does not say what to do.
	var owner string
	err = w.pool.QueryRow(ctx, `SELECT coalesce('database ' || quote_ident(database), 'no database (a physical slot)')
		FROM pg_replication_slots WHERE slot_name = $1 AND database IS DISTINCT FROM current_database()`, w.cfg.Slot).Scan(&owner)
	if err == nil {
		return fmt.Errorf("%w: replication slot %s belongs to %s; slot names are cluster-wide: give this worker a slot of its own (--slot, SYNCHRO_SLOT)",
			errBlocked, w.cfg.Slot, owner)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	created, err := q.ClockTimestamp(ctx)
	if err != nil {
		return err
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, w.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return fmt.Errorf("create slot %s: %w", w.cfg.Slot, err)
	}
	if err := q.StartStream(ctx, db.StartStreamParams{SlotName: w.cfg.Slot, GenerationStart: res.ConsistentPoint, CreatedAt: created}); err != nil {
		return err
	}
	w.cfg.Log.Info("stream generation started", "worker", w.cfg.WorkerID, "slot", w.cfg.Slot, "generation_start", res.ConsistentPoint)
	return nil
}

// positions is the durable progress beside the slot's confirmed position and
// what the slot of that name is.
type positions struct {
	slot, start, ack, processed pglogrepl.LSN
	problem                     string // why the slot found cannot be streamed ("" when it can)
}

func (w *Worker) readPositions(ctx context.Context) (positions, error) {
	var p positions
	var problem, slot *string
	var start, ack, processed string
	// synchro.slot_problem holds the rules of a usable slot, shared with
	// readiness. The worker never repairs a slot by creating it again: that would
	// silently skip the WAL in between. START_REPLICATION on an invalidated slot
	// would fail on every session with a message that does not say why.
	err := w.pool.QueryRow(ctx, `
		SELECT s.problem, s.confirmed_flush_lsn::text,
		       p.generation_start_lsn::text,
		       coalesce(p.acknowledged_end_lsn, p.generation_start_lsn)::text,
		       p.processed_end_lsn::text
		FROM synchro.stream_progress($1) p, synchro.slot_problem(p.slot_name) s`, w.staged()).
		Scan(&problem, &slot, &start, &ack, &processed)
	if err != nil {
		return p, err
	}
	for _, f := range []struct {
		s   string
		dst *pglogrepl.LSN
	}{{start, &p.start}, {ack, &p.ack}, {processed, &p.processed}} {
		if *f.dst, err = pglogrepl.ParseLSN(f.s); err != nil {
			return p, err
		}
	}
	if problem != nil {
		p.problem = *problem
		return p, nil
	}
	if p.slot, err = pglogrepl.ParseLSN(*slot); err != nil {
		return p, err
	}
	return p, nil
}

// reconcileSlot refuses a slot it cannot stream (synchro.slot_problem), repairs the two
// legal crash windows and refuses the two illegal slot positions (docs/change-stream.md, "Slot
// acknowledgement"), returning the acknowledgement the stream resumes from.
func (w *Worker) reconcileSlot(ctx context.Context) (pglogrepl.LSN, error) {
	p, err := w.readPositions(ctx)
	if err != nil {
		return 0, err
	}
	switch {
	case p.problem != "":
		return 0, fmt.Errorf("%w: %s", errBlocked, p.problem)
	case p.slot < p.start:
		return 0, fmt.Errorf("%w: slot %s at %s is before the generation start %s", errBlocked, w.getSlot(), p.slot, p.start)
	case p.slot > p.processed:
		return 0, fmt.Errorf("%w: slot %s at %s is after the processed boundary %s", errBlocked, w.getSlot(), p.slot, p.processed)
	case p.slot < p.ack:
		// The slot advance did not survive a crash: every transaction up to the
		// acknowledgement is durable, so advancing skips and replays nothing.
		if err := db.New(w.pool).AdvanceSlot(ctx, db.AdvanceSlotParams{SlotName: w.getSlot(), Position: p.ack.String()}); err != nil {
			return 0, fmt.Errorf("advance slot to acknowledgement: %w", err)
		}
		w.cfg.Log.Info("slot advanced to durable acknowledgement", "worker", w.cfg.WorkerID, "from", p.slot, "to", p.ack)
	case p.slot > p.ack:
		// The crash came after the slot advance and before the acknowledgement
		// record; everything before the slot position is durable.
		if err := w.recordAcknowledgement(ctx, p.slot); err != nil {
			return 0, err
		}
		w.cfg.Log.Info("acknowledgement adopted from slot", "worker", w.cfg.WorkerID, "from", p.ack, "to", p.slot)
		p.ack = p.slot
	}
	return p.ack, nil
}
