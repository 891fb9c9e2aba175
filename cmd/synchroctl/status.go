package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/synchro-sync/synchro/internal/db"
)

// statusReport is what `synchroctl status` shows (and prints with --json).
type statusReport struct {
	Ready     bool                    `json:"ready"`
	Readiness []db.ListReadinessRow   `json:"readiness"`
	Stream    *db.GetStreamStatusRow  `json:"stream"`
	History   *db.GetHistoryStatusRow `json:"history"`
	Storage   []db.ListStorageRow     `json:"storage"`
	Workers   []db.ListWorkersRow     `json:"workers"`
	Poison    []db.ListPoisonRow      `json:"poison"`
}

func runStatus(ctx context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	c, pool, err := parseDBCommand(ctx, "status", args, 0, "usage: synchroctl status [--json] [--database-url URL]")
	if err != nil {
		return err
	}
	defer pool.Close()
	q := db.New(pool)
	var r statusReport
	if r.Readiness, err = q.ListReadiness(ctx); err != nil {
		return err
	}
	r.Ready = len(r.Readiness) > 0
	for _, chk := range r.Readiness {
		r.Ready = r.Ready && chk.Ok
	}
	// Both have a row once a stream exists, none before.
	if r.Stream, err = optional(q.GetStreamStatus(ctx)); err != nil {
		return err
	}
	if r.History, err = optional(q.GetHistoryStatus(ctx)); err != nil {
		return err
	}
	if r.Storage, err = q.ListStorage(ctx); err != nil {
		return err
	}
	if r.Workers, err = q.ListWorkers(ctx); err != nil {
		return err
	}
	if r.Poison, err = q.ListPoison(ctx); err != nil {
		return err
	}
	if c.json {
		if err := c.output(out, r, nil, nil); err != nil {
			return err
		}
		return r.exit()
	}

	fmt.Fprintf(out, "READY: %s\n\n", map[bool]string{true: "yes", false: "NO"}[r.Ready])
	rows := make([][]string, 0, len(r.Readiness))
	for _, chk := range r.Readiness {
		rows = append(rows, []string{chk.Check, map[bool]string{true: "ok", false: "FAIL"}[chk.Ok], chk.Reason})
	}
	if err := printTable(out, []string{"check", "status", "reason"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if r.Stream == nil {
		fmt.Fprintln(out, "STREAM: none started (no worker has run against this database)")
	} else {
		s := r.Stream
		lag := "unknown (slot missing)"
		if s.WalLagBytes >= 0 {
			lag = fmt.Sprintf("%d bytes", s.WalLagBytes)
		}
		commitLag := "unknown"
		if s.CommitLagSeconds >= 0 {
			commitLag = fmt.Sprintf("%.1fs", s.CommitLagSeconds)
		}
		if err := printTable(out, []string{"stream", "value"}, [][]string{
			{"generation", s.StreamGeneration},
			{"slot", s.SlotName + " (confirmed_flush " + orDash(true, s.SlotConfirmedFlush) + ")"},
			{"generation_start", s.GenerationStart},
			{"materialized", "commit " + orDash(true, s.MaterializedCommit) + ", end " + orDash(true, s.MaterializedEnd)},
			{"processed", s.ProcessedEnd},
			{"acknowledged", s.AcknowledgedEnd},
			{"registry_generation", fmt.Sprint(s.RegistryGeneration)},
			{"wal_lag", lag},
			{"commit_lag", commitLag},
			{"capture_history_pruned", map[bool]string{true: "none", false: "through commit " + s.HistoryPrunedCommit}[s.HistoryPrunedCommit == ""]},
		}); err != nil {
			return err
		}
	}
	if r.History != nil {
		fmt.Fprintln(out)
		if err := printTable(out, []string{"history", "value"}, historyRows(r.History)); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	rows = rows[:0]
	for _, w := range r.Workers {
		rows = append(rows, []string{w.WorkerID, w.State, w.DatabaseName, fmt.Sprintf("%.1fs", w.AgeSeconds), orDash(true, w.MaterializedEnd)})
	}
	if err := printTable(out, []string{"worker", "state", "database", "heartbeat_age", "materialized_end"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := printStorage(out, r.Storage); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "\nPOISON: %d blocking transaction(s)%s\n", len(r.Poison),
		map[bool]string{true: " (synchroctl poison list)", false: ""}[len(r.Poison) > 0]); err != nil {
		return err
	}
	return r.exit()
}

// optional is &v, or nil when the query found no row (pgx.ErrNoRows).
func optional[T any](v T, err error) (*T, error) {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &v, nil
}

// historyRows are the HISTORY table's rows: the retention horizon of the pull
// history and what the last pruning round removed.
func historyRows(h *db.GetHistoryStatusRow) [][]string {
	if h.Horizon == "" {
		return [][]string{{"horizon", "none (nothing pruned)"}}
	}
	return [][]string{
		{"horizon", fmt.Sprintf("commit %s, materialized %s (%s ago)", h.Horizon, timestamp(h.HorizonMaterializedAt), seconds(h.HorizonAgeSeconds))},
		{"advanced_at", timestamp(h.AdvancedAt)},
		{"last_round", fmt.Sprintf("%s, took %s", timestamp(h.RoundStartedAt), seconds(h.RoundSeconds))},
		{"last_round_removed", fmt.Sprintf("effects %d, row versions %d, membership edges %d, scope digests %d",
			h.RoundEffects, h.RoundVersions, h.RoundEdges, h.RoundDigests)},
	}
}

// printStorage prints the storage each table of schema synchro takes, largest
// first, and their sum.
func printStorage(out io.Writer, tables []db.ListStorageRow) error {
	rows := make([][]string, 0, len(tables))
	var total int64
	for _, t := range tables {
		rows = append(rows, []string{t.TableName, fmt.Sprint(t.RowsEstimate), humanBytes(t.TableBytes), humanBytes(t.IndexBytes), humanBytes(t.TotalBytes)})
		total += t.TotalBytes
	}
	if err := printTable(out, []string{"table", "rows_estimate", "table_size", "index_size", "total_size"}, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "STORAGE: %d tables of schema synchro, %s in all\n", len(tables), humanBytes(total))
	return err
}

// exitNotReady is the exit status of `synchroctl status` when the report says
// not ready, so that a script can gate on it; 1 remains "could not tell".
const exitNotReady = 3

// exit is nil when the report is ready and an exitError otherwise.
func (r statusReport) exit() error {
	if r.Ready {
		return nil
	}
	failing := 0
	for _, chk := range r.Readiness {
		if !chk.Ok {
			failing++
		}
	}
	if failing == 0 {
		return exitError{code: exitNotReady, msg: "not ready: no readiness checks to pass"}
	}
	return exitError{code: exitNotReady, msg: fmt.Sprintf("not ready: %d readiness check(s) failing", failing)}
}
