package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/synchro-sync/synchro/internal/config"
	"github.com/synchro-sync/synchro/internal/migrate"
)

func runMigrate(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("synchroctl migrate", flag.ContinueOnError)
	var common config.Common
	// No --slot: migrating names no slot (the worker creates its own).
	common.RegisterDatabase(fs)
	common.RegisterPublication(fs)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if err := common.Validate(); err != nil {
		return err
	}
	res, err := migrate.Apply(ctx, common.DatabaseURL, common.Publication, log)
	if err != nil {
		return err
	}
	if res.Unchanged() {
		fmt.Fprintf(out, "database is up to date (schema version %d, function bundle %.12s); nothing changed\n",
			res.SchemaVersion, res.BundleDigest)
		return nil
	}
	fmt.Fprintf(out, "applied %d migration(s); schema version %d; function bundle %.12s %s\n",
		len(res.Applied), res.SchemaVersion, res.BundleDigest, map[bool]string{true: "installed", false: "unchanged"}[res.BundleChanged])
	return nil
}
