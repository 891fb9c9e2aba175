package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/synchro-sync/synchro/internal/db"
)

const poisonUsage = "usage: synchroctl poison list | show ID | retry ID [--json] [--database-url URL]"

func runPoison(ctx context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	if len(args) == 0 {
		return errors.New(poisonUsage)
	}
	sub := args[0]
	npos := 0
	switch sub {
	case "list":
	case "show", "retry":
		npos = 1 // the poison id
	default:
		return helpOr(args, out, poisonUsage, errors.New(poisonUsage))
	}
	c, pool, err := parseDBCommand(ctx, "poison "+sub, args[1:], npos, poisonUsage)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := db.New(pool)
	var id int64
	if npos == 1 {
		if id, err = strconv.ParseInt(c.args[0], 10, 64); err != nil {
			return fmt.Errorf("poison id %q is not a number", c.args[0])
		}
	}
	switch sub {
	case "list", "show":
		all, err := q.ListPoison(ctx)
		if err != nil {
			return err
		}
		list := []db.ListPoisonRow{}
		for _, p := range all {
			if sub == "list" || p.PoisonID == id {
				list = append(list, p)
			}
		}
		if sub == "show" && len(list) == 0 {
			return fmt.Errorf("no blocking poison transaction with id %d", id)
		}
		if sub == "list" && len(list) == 0 && !c.json {
			_, err := fmt.Fprintln(out, "no blocking poison transactions")
			return err
		}
		rows := make([][]string, 0, len(list))
		for _, p := range list {
			rows = append(rows, []string{fmt.Sprint(p.PoisonID), p.CommitLsn, p.EndLsn, fmt.Sprint(p.Xid), p.FailureClass,
				orDash(true, p.Sqlstate), orDash(p.RelationID.Valid, fmt.Sprint(p.RelationID.Int64)), orDash(true, p.Relation),
				fmt.Sprint(p.Attempts), p.LastFailedAt.Time.UTC().Format(time.RFC3339),
				orDash(p.RetryRequestedAt.Valid, p.RetryRequestedAt.Time.UTC().Format(time.RFC3339))})
		}
		return c.output(out, list, []string{"poison_id", "commit_lsn", "end_lsn", "xid", "class", "sqlstate",
			"relation_id", "relation", "attempts", "last_failed_at", "retry_requested_at"}, rows)
	case "retry":
		ok, err := q.RetryPoison(ctx, id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no blocking poison transaction with id %d", id)
		}
		_, err = fmt.Fprintf(out, "retry requested for poison %d; the worker re-runs the same transaction with the same replay identities\n", id)
		return err
	}
	return fmt.Errorf(poisonUsage)
}
