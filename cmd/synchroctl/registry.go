package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/config"
	"github.com/synchro-sync/synchro/internal/db"
)

func runRegistry(ctx context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	if len(args) == 0 || args[0] != "list" {
		return fmt.Errorf("usage: synchroctl registry list [--json] [--database-url URL]")
	}
	fs := flag.NewFlagSet("synchroctl registry list", flag.ContinueOnError)
	var common config.Common
	common.Register(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := config.Parse(fs, args[1:], config.CommonEnv); err != nil {
		return err
	}
	if err := common.Validate(); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, common.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	rows, err := db.New(pool).ListRelations(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(out).Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RELATION_ID\tKIND\tRELATION\tOID\tKEY\tGENERATION\tTABLE_ID\tWIRE_NAME\tPUSH")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s.%s\t%d\t%s %s\t%d\t%s\t%s\t%s\n", r.RelationID, r.RegistrationKind,
			r.SchemaName, r.RelationName, r.RelationOid.Uint32, r.KeyColumn, r.KeyType, r.Generation,
			orDash(r.TableID.Valid, fmt.Sprint(r.TableID.Int32)), orDash(r.TableName.Valid, r.TableName.String),
			orDash(r.PushPolicy.Valid, r.PushPolicy.String))
	}
	return tw.Flush()
}

func orDash(valid bool, s string) string {
	if !valid {
		return "-"
	}
	return s
}
