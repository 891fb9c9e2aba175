package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/synchro-sync/synchro/internal/db"
)

func runRegistry(ctx context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	const usage = "usage: synchroctl registry list [--json] [--database-url URL]"
	if len(args) == 0 || args[0] != "list" {
		return helpOr(args, out, usage, errors.New(usage))
	}
	c, pool, err := parseDBCommand(ctx, "registry list", args[1:], 0, usage)
	if err != nil {
		return err
	}
	defer pool.Close()
	rels, err := db.New(pool).ListRelations(ctx)
	if err != nil {
		return err
	}
	rows := make([][]string, 0, len(rels))
	for _, r := range rels {
		rows = append(rows, []string{fmt.Sprint(r.RelationID), r.RegistrationKind, r.SchemaName + "." + r.RelationName,
			fmt.Sprint(r.RelationOid.Uint32), r.KeyColumn + " " + r.KeyType, fmt.Sprint(r.Generation),
			orDash(r.TableID.Valid, fmt.Sprint(r.TableID.Int32)), orDash(r.TableName.Valid, r.TableName.String),
			orDash(r.PushPolicy.Valid, r.PushPolicy.String)})
	}
	return c.output(out, rels, []string{"relation_id", "kind", "relation", "oid", "key", "generation", "table_id", "wire_name", "push"}, rows)
}
