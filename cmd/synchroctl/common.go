package main

import (
	"context"
	"encoding/json"
	"errors"
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

// parseDBCommand parses args (flags before or after the positional arguments),
// requires exactly npos positional arguments (else usage; npos < 0: any
// number, which the caller checks), and connects.
func parseDBCommand(ctx context.Context, name string, args []string, npos int, usage string) (*dbCommand, *pgxpool.Pool, error) {
	c := &dbCommand{}
	fs := flag.NewFlagSet("synchroctl "+name, flag.ContinueOnError)
	c.common.RegisterDatabase(fs)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	var err error
	if c.args, err = parseArgs(fs, args); err != nil {
		return nil, nil, err
	}
	if npos >= 0 && len(c.args) > npos {
		return nil, nil, fmt.Errorf("unexpected arguments %q\n%s", c.args[npos:], usage)
	}
	if npos >= 0 && len(c.args) < npos {
		return nil, nil, errors.New(usage)
	}
	if err := c.common.Validate(); err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.New(ctx, c.common.DatabaseURL)
	if err != nil {
		return nil, nil, err
	}
	return c, pool, nil
}

// parseArgs parses fs from args and returns the positional arguments. Flags may
// follow them (synchroctl poison show 1 --database-url URL): the flag package
// stops at the first positional argument, so each one is taken and the rest is
// parsed again. Everything after "--" is positional. Environment variables fill
// the flags not given once all are parsed.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// No arguments left: this only applies the environment to the flags not given.
	return positional, config.Parse(fs, nil)
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
