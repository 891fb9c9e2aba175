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
	"time"

	"github.com/jackc/pgx/v5/pgtype"
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

// timestamp is t in RFC 3339 UTC with whole seconds, "-" when NULL.
func timestamp(t pgtype.Timestamptz) string {
	if !t.Valid {
		return "-"
	}
	return t.Time.UTC().Format(time.RFC3339)
}

// seconds is a duration of s seconds in readable units ("1.25s", "168h0m3s"),
// "unknown" when s is negative (not known).
func seconds(s float64) string {
	if s < 0 {
		return "unknown"
	}
	d := time.Duration(s * float64(time.Second))
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// humanBytes is n bytes in binary units with one decimal ("812 B", "1.5 KiB",
// "20.4 MiB"); a figure that would round to 1024.0 takes the next unit.
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	const units = "KMGTPE"
	v, i := float64(n)/1024, 0
	for v >= 1023.95 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
