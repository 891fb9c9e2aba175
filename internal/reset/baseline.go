package reset

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/wal"
)

// stageRows is how many synced rows one synchro.stage_synced_rows call gives
// versions and memberships (a call of about a second at most).
const stageRows = 20000

// fetchRows is how many rows the baseline reads per FETCH, renders and copies
// into the stage at once: the memory one relation's staging holds.
const fetchRows = 5000

// stage creates the candidate slot with an exported snapshot and stages the
// baseline under it in one transaction, which moves the reset to catching_up.
// The replication connection issues nothing after CREATE_REPLICATION_SLOT and
// stays open until the baseline transaction imported the snapshot.
func (c *coordinator) stage(ctx context.Context, cur db.CurrentResetRow) error {
	q := db.New(c.pool)
	if err := q.EnsureCapturePublication(ctx); err != nil {
		return fmt.Errorf("ensure the capture publication: %w", err)
	}
	repl, err := wal.ReplicationConn(ctx, c.cfg.DatabaseURL, "synchro-"+c.kind)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background())
	slot, err := pglogrepl.CreateReplicationSlot(ctx, repl, cur.CandidateSlot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "(SNAPSHOT 'export')"})
	if err != nil {
		return fmt.Errorf("create candidate slot %s: %w", cur.CandidateSlot, err)
	}
	c.cfg.Log.Info("candidate slot created", c.kind, cur.ResetID.String(), "slot", cur.CandidateSlot,
		"consistent_point", slot.ConsistentPoint)
	if err := c.point(PointSlotCreated); err != nil {
		return err
	}

	conn, err := baselineConn(ctx, c.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after Commit
	name, err := conn.PgConn().EscapeString(slot.SnapshotName)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+name+"'"); err != nil {
		return fmt.Errorf("import the candidate slot's snapshot: %w", err)
	}
	// A transaction_timeout set for the database's sessions (PostgreSQL 17)
	// does not bind the baseline either.
	if _, err := tx.Exec(ctx, "SELECT synchro.lift_timeouts(true)"); err != nil {
		return err
	}
	// Imported: the exported snapshot is no longer needed.
	repl.Close(ctx) //nolint:errcheck
	if err := db.New(tx).BeginBaseline(ctx, db.BeginBaselineParams{ResetID: cur.ResetID, ConsistentPoint: slot.ConsistentPoint,
		SnapshotName: slot.SnapshotName}); err != nil {
		return err
	}

	regs, err := db.New(tx).LoadRegistry(ctx)
	if err != nil {
		return err
	}
	if c.kind == "bootstrap" {
		regs = slices.DeleteFunc(regs, func(r db.LoadRegistryRow) bool { return !slices.Contains(cur.RelationIds, r.RelationID) })
	}
	p := newStagingProgress(c, cur.ResetID.String())
	if err := p.estimate(ctx, tx, regs); err != nil {
		return err
	}
	for _, reg := range regs {
		if err := p.copyRelation(ctx, tx, cur.TargetGeneration, reg); err != nil {
			return err
		}
		if err := c.point(PointStaging); err != nil {
			return err
		}
	}
	p.begin("versions and memberships")
	for _, reg := range regs {
		if reg.TableID.Valid {
			if err := p.stageSyncedRows(ctx, tx, cur.ResetID, reg); err != nil {
				return err
			}
		}
	}
	stop := p.ticking(ctx, "deletion versions, scope digests and coverage")
	err = db.New(tx).StageBaseline(ctx, cur.ResetID)
	stop()
	if err != nil {
		return fmt.Errorf("stage baseline: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	p.done()
	return c.point(PointBaselined)
}

// baselineConn connects in wal.OutputSettings, so that the baseline's text
// values are the walsender's, and without the database's application timeouts
// (wal.LiftTimeouts). The URL is parsed as a pool's, as the worker's are.
func baselineConn(ctx context.Context, url string) (*pgx.Conn, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg := pcfg.ConnConfig
	for k, v := range wal.OutputSettings {
		cfg.RuntimeParams[k] = v
	}
	wal.LiftTimeouts(cfg.RuntimeParams)
	cfg.RuntimeParams["application_name"] = "synchro-reset"
	return pgx.ConnectConfig(ctx, cfg)
}

// stagingProgress counts the rows staged and logs them every ProgressInterval
// with their rate and an ETA from the relations' estimated sizes: first the
// rows copied (step "projections"), then the synced rows given versions and
// memberships, then, while the last statement runs, the step alone.
type stagingProgress struct {
	c        *coordinator
	id       string
	started  time.Time
	logged   time.Time
	step     string
	rows     int64
	loggedAt int64
	total    int64 // estimated rows of the step
	relation string
	relRows  int64
	copied   int64 // rows of every relation copied
	synced   int64 // of which rows of synced tables
}

func newStagingProgress(c *coordinator, id string) *stagingProgress {
	now := time.Now()
	return &stagingProgress{c: c, id: id, started: now, logged: now, step: "projections"}
}

// begin starts the next step of the staging, counting its rows from zero.
func (p *stagingProgress) begin(name string) {
	p.copied = p.rows
	p.step, p.rows, p.loggedAt, p.total, p.logged = name, 0, 0, p.synced, time.Now()
}

// ticking logs step every ProgressInterval until the returned stop is called:
// the progress of one statement whose rows cannot be counted while it runs.
func (p *stagingProgress) ticking(ctx context.Context, step string) (stop func()) {
	started := time.Now()
	return every(ctx, p.c.cfg.ProgressInterval, func(context.Context) {
		p.c.cfg.Log.Info(p.c.kind+" staging", p.c.kind, p.id, "step", step, "elapsed", time.Since(started).Round(time.Second))
	})
}

// stageSyncedRows gives one synced table's staged rows their versions and
// membership edges (synchro.stage_synced_rows), a chunk at a time.
func (p *stagingProgress) stageSyncedRows(ctx context.Context, tx pgx.Tx, id pgtype.UUID, reg db.LoadRegistryRow) error {
	p.relation, p.relRows = reg.SchemaName+"."+reg.RelationName, 0
	after := pgtype.Text{}
	for {
		chunk, err := db.New(tx).StageSyncedRows(ctx, db.StageSyncedRowsParams{ResetID: id, TableID: reg.TableID.Int32,
			AfterKey: after, MaxRows: stageRows})
		if err != nil {
			return fmt.Errorf("stage %s: %w", p.relation, err)
		}
		if chunk.Staged == 0 {
			return nil
		}
		p.add(int(chunk.Staged))
		after = pgtype.Text{String: chunk.LastKey, Valid: true}
	}
}

func (p *stagingProgress) estimate(ctx context.Context, tx pgx.Tx, regs []db.LoadRegistryRow) error {
	oids := make([]uint32, len(regs))
	for i, r := range regs {
		oids[i] = uint32(r.RelationOid)
	}
	return tx.QueryRow(ctx, `SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint FROM pg_class c WHERE c.oid = ANY ($1::oid[])`,
		oids).Scan(&p.total)
}

func (p *stagingProgress) add(n int) {
	p.rows += int64(n)
	p.relRows += int64(n)
	now := time.Now()
	if now.Sub(p.logged) < p.c.cfg.ProgressInterval {
		return
	}
	secs := now.Sub(p.logged).Seconds()
	rate := float64(p.rows-p.loggedAt) / secs
	attrs := []any{p.c.kind, p.id, "step", p.step, "relation", p.relation, "relation_rows", p.relRows, "rows", p.rows,
		"rows_per_second", int64(rate)}
	if p.total > p.rows && rate > 0 {
		attrs = append(attrs, "eta", (time.Duration(float64(p.total-p.rows)/rate) * time.Second).Round(time.Second))
	}
	p.c.cfg.Log.Info(p.c.kind+" staging", attrs...)
	p.logged, p.loggedAt = now, p.rows
}

func (p *stagingProgress) done() {
	d := time.Since(p.started)
	p.c.cfg.Log.Info(p.c.kind+" baseline staged", p.c.kind, p.id, "rows", p.copied, "duration", d.Round(time.Millisecond),
		"rows_per_second", int64(float64(p.copied)/max(d.Seconds(), 1e-3)))
}

// copyRelation stages the projections of one registered relation: its rows
// under the snapshot, read in text form through a cursor, rendered as capture
// renders a decoded row (capture.Image) and copied into synchro.projection
// under the target generation.
func (p *stagingProgress) copyRelation(ctx context.Context, tx pgx.Tx, gen pgtype.UUID, reg db.LoadRegistryRow) error {
	p.relation, p.relRows = reg.SchemaName+"."+reg.RelationName, 0
	registered := make(map[string]uint32, len(reg.Columns))
	cols := make([]string, 0, len(reg.Columns)+1)
	cols = append(cols, pgx.Identifier{reg.KeyColumn}.Sanitize())
	for i, name := range reg.Columns {
		registered[name] = reg.ColumnTypes[i].Uint32
		cols = append(cols, pgx.Identifier{name}.Sanitize())
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("DECLARE synchro_baseline NO SCROLL CURSOR FOR SELECT %s FROM %s",
		strings.Join(cols, ", "), pgx.Identifier{reg.SchemaName, reg.RelationName}.Sanitize())); err != nil {
		return fmt.Errorf("stage %s: %w", p.relation, err)
	}
	copyCols := []string{"stream_generation", "relation_id", "key", "image"}
	batch := make([][]any, 0, fetchRows)
	row := make([]capture.Column, len(reg.Columns))
	for {
		batch = batch[:0]
		rows, err := tx.Query(ctx, fmt.Sprintf("FETCH FORWARD %d FROM synchro_baseline", fetchRows), pgx.QueryResultFormats{pgx.TextFormatCode})
		if err != nil {
			return fmt.Errorf("stage %s: %w", p.relation, err)
		}
		for rows.Next() {
			vals := rows.RawValues()
			for i, name := range reg.Columns {
				v := vals[i+1]
				row[i] = capture.Column{Name: name, TypeOID: registered[name], Null: v == nil, Text: string(v)}
			}
			img, err := capture.Image(row, registered)
			if err != nil {
				rows.Close()
				return fmt.Errorf("stage %s: %w", p.relation, err)
			}
			batch = append(batch, []any{gen, reg.RelationID, string(vals[0]), img})
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("stage %s: %w", p.relation, err)
		}
		if len(batch) == 0 {
			break
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"synchro", "projection"}, copyCols, pgx.CopyFromRows(batch)); err != nil {
			return fmt.Errorf("stage %s: %w", p.relation, err)
		}
		p.add(len(batch))
		if reg.TableID.Valid {
			p.synced += int64(len(batch))
		}
	}
	_, err := tx.Exec(ctx, "CLOSE synchro_baseline")
	return err
}
