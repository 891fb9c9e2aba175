package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/synchro-sync/synchro/client"
	"github.com/synchro-sync/synchro/internal/config"
)

// runClient runs `synchroctl client sync`: one sync cycle of a local SQLite
// replica with the Go SDK, then a summary of what it did and holds.
func runClient(ctx context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	const usage = `usage: synchroctl client sync --db FILE [--server URL] [--client-id ID] [--token TOKEN]`
	if len(args) == 0 || args[0] != "sync" {
		return helpOr(args, out, usage, errors.New(usage))
	}
	var (
		dbPath, server, clientID, tok, platform string
		pageSize                                int
	)
	fs := flag.NewFlagSet("synchroctl client sync", flag.ContinueOnError)
	fs.StringVar(&dbPath, "db", "", "local SQLite database file (created when missing; required)")
	fs.StringVar(&server, "server", "http://127.0.0.1:8080", "Synchro server URL (env SYNCHRO_SERVER_URL)")
	fs.StringVar(&clientID, "client-id", "", "client ID (default: the one stored in the database, else a new random one)")
	fs.StringVar(&tok, "token", "", "bearer token (env SYNCHRO_TOKEN); see synchroctl dev-token")
	fs.StringVar(&platform, "platform", "synchroctl", "platform reported on connect")
	fs.IntVar(&pageSize, "page-size", 500, "pull and rebuild page size")
	if err := config.Parse(fs, args[1:]); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case dbPath == "":
		return errors.New("no database: pass --db")
	}
	cfg := client.Config{ServerURL: server, ClientID: clientID, Platform: platform, AppVersion: "synchroctl", PageSize: pageSize}
	if tok != "" {
		cfg.Token = func(context.Context) (string, error) { return tok, nil }
	}
	c, err := client.Open(ctx, dbPath, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	rep, err := c.SyncReport(ctx)
	if err != nil {
		return err
	}
	rebuilt := strings.Join(rep.Rebuilt, ", ")
	if err := printTable(out, []string{"client", "pushed", "rejected", "retried", "pulled changes", "rebuilt scopes", "pending"},
		[][]string{{c.ClientID(), strconv.Itoa(rep.Pushed), strconv.Itoa(rep.Rejected), strconv.Itoa(rep.Retried),
			strconv.Itoa(rep.Pulled), orDash(true, rebuilt), strconv.Itoa(rep.Pending)}}); err != nil {
		return err
	}
	fmt.Fprintln(out)
	scopes, err := c.Scopes(ctx)
	if err != nil {
		return err
	}
	rows := make([][]string, 0, len(scopes))
	for _, s := range scopes {
		rows = append(rows, []string{s.ID, strconv.Itoa(s.Rows), strconv.FormatUint(uint64(s.Checksum), 10)})
	}
	if err := printTable(out, []string{"scope", "rows", "checksum"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(out)
	rows = rows[:0]
	for _, t := range c.Tables() {
		var n int
		if err := c.DB().QueryRowContext(ctx, `SELECT count(*) FROM "`+strings.ReplaceAll(t, `"`, `""`)+`"`).Scan(&n); err != nil {
			return err
		}
		rows = append(rows, []string{t, strconv.Itoa(n)})
	}
	return printTable(out, []string{"table", "rows"}, rows)
}
