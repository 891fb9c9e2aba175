package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/config"
	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/reset"
)

const resetUsage = `usage: synchroctl reset start [--activate] [--reason TEXT] | status [--json] | activate [ID] | abort [ID] | retire [ID]
  [--database-url URL]

start runs (or resumes) a stream reset in the foreground: a candidate slot with an exported snapshot, the staged
baseline, the staged catch-up through a barrier and verification; it exits 0 once the reset is ready, or with
--activate, activated. activate, abort and retire take the reset in progress (retire: the latest activated one)
unless given its ID.`

func runReset(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	if len(args) == 0 {
		return errors.New(resetUsage)
	}
	sub := args[0]
	switch sub {
	case "start":
		return runResetStart(ctx, args[1:], out, log)
	case "status":
		return runResetStatus(ctx, args[1:], out)
	case "activate", "abort", "retire":
		return runResetCall(ctx, sub, args[1:], out)
	}
	return helpOr(args, out, resetUsage, errors.New(resetUsage))
}

func runResetStart(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	var common config.Common
	var activate bool
	var reason string
	fs := flag.NewFlagSet("synchroctl reset start", flag.ContinueOnError)
	common.RegisterDatabase(fs)
	fs.BoolVar(&activate, "activate", false, "activate the reset once it is ready")
	fs.StringVar(&reason, "reason", "operator reset", "why the stream is reset (recorded with it)")
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("unexpected arguments %q\n%s", rest, resetUsage)
	}
	if err := common.Validate(); err != nil {
		return err
	}
	res, err := reset.Run(ctx, reset.Config{DatabaseURL: common.DatabaseURL, Reason: reason, Activate: activate, Log: log})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "stream reset %s is %s\n", res.ResetID, res.Phase)
	return err
}

func runResetStatus(ctx context.Context, args []string, out io.Writer) error {
	c, pool, err := parseDBCommand(ctx, "reset status", args, 0, resetUsage)
	if err != nil {
		return err
	}
	defer pool.Close()
	list, err := db.New(pool).ResetStatus(ctx)
	if err != nil {
		return err
	}
	if len(list) == 0 && !c.json {
		_, err := fmt.Fprintln(out, "no stream resets")
		return err
	}
	at := func(t pgtype.Timestamptz) string {
		return orDash(t.Valid, t.Time.UTC().Format(time.RFC3339))
	}
	rows := make([][]string, 0, len(list))
	for _, r := range list {
		rows = append(rows, []string{r.ResetID.String(), r.Phase, r.CandidateSlot, r.SlotState, orDash(true, r.ConsistentPoint),
			orDash(true, r.StagedThrough), orDash(true, r.BarrierEndLsn), fmt.Sprint(r.DistanceBytes), fmt.Sprint(r.RelationsStaged),
			fmt.Sprint(r.RowsStaged), fmt.Sprint(r.FencesCovered), fmt.Sprint(r.TxnsCaughtUp), at(r.StartedAt), at(r.ActivatedAt),
			at(r.RetiredAt), at(r.AbortedAt)})
	}
	return c.output(out, list, []string{"reset_id", "phase", "candidate_slot", "slot", "consistent_point", "staged_through",
		"barrier", "distance_bytes", "relations", "rows_staged", "fences_covered", "txns_caught_up", "started_at",
		"activated_at", "retired_at", "aborted_at"}, rows)
}

func runResetCall(ctx context.Context, sub string, args []string, out io.Writer) error {
	c, pool, err := parseDBCommand(ctx, "reset "+sub, args, -1, resetUsage)
	if err != nil {
		return err
	}
	defer pool.Close()
	if len(c.args) > 1 {
		return fmt.Errorf("unexpected arguments %q\n%s", c.args[1:], resetUsage)
	}
	id, err := resetID(ctx, pool, sub, c.args)
	if err != nil {
		return err
	}
	q := db.New(pool)
	switch sub {
	case "activate":
		err = q.ActivateReset(ctx, id)
	case "abort":
		err = q.AbortReset(ctx, id)
	case "retire":
		var removed []byte
		if removed, err = q.RetireReset(ctx, id); err == nil {
			_, err = fmt.Fprintf(out, "stream reset %s retired; removed: %s\n", id, removed)
			return err
		}
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "stream reset %s %s\n", id, map[string]string{"activate": "activated", "abort": "aborted"}[sub])
	return err
}

// resetID is the reset a call names, else the one in progress (retire: the
// latest reset).
func resetID(ctx context.Context, pool *pgxpool.Pool, sub string, args []string) (pgtype.UUID, error) {
	var id pgtype.UUID
	if len(args) == 1 {
		if err := id.Scan(args[0]); err != nil {
			return id, fmt.Errorf("reset id %q is not a UUID", args[0])
		}
		return id, nil
	}
	q := db.New(pool)
	if sub == "retire" {
		id, err := q.LatestReset(ctx)
		if errors.Is(err, pgx.ErrNoRows) {
			return id, errors.New("no stream reset to retire")
		}
		return id, err
	}
	cur, err := q.CurrentReset(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return id, errors.New("no stream reset in progress")
	}
	return cur.ResetID, err
}
