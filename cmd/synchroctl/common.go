package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/config"
)

// dbCommand parses the flags every database subcommand shares (--database-url,
// --json) and connects.
type dbCommand struct {
	common config.Common
	json   bool
	args   []string // positional arguments
}

func parseDBCommand(ctx context.Context, name string, args []string) (*dbCommand, *pgxpool.Pool, error) {
	c := &dbCommand{}
	fs := flag.NewFlagSet("synchroctl "+name, flag.ContinueOnError)
	c.common.Register(fs)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	if err := config.Parse(fs, args, config.CommonEnv); err != nil {
		return nil, nil, err
	}
	if err := c.common.Validate(); err != nil {
		return nil, nil, err
	}
	c.args = fs.Args()
	pool, err := pgxpool.New(ctx, c.common.DatabaseURL)
	if err != nil {
		return nil, nil, err
	}
	return c, pool, nil
}

// output prints v as JSON with --json, else the table.
func (c *dbCommand) output(out io.Writer, v any, header []string, rows [][]string) error {
	if c.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return printTable(out, header, rows)
}

// printTable prints an aligned table with an upper-case header.
func printTable(out io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(header, "\t")))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func orDash(valid bool, s string) string {
	if !valid || s == "" {
		return "-"
	}
	return s
}
