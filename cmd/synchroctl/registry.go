package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/reset"
)

const registryUsage = `usage: synchroctl registry list | reconfigure RELATION RULE [OPTIONS] | unregister RELATION | unregister-dependency RELATION | bootstrap [--json] [--database-url URL]
  list                                 the registered relations and their state
  reconfigure RELATION RULE [OPTIONS]  change a synced table's scope rule and options (JSON, as register_table takes them)
  unregister RELATION                  remove a synced table from sync
  unregister-dependency RELATION       remove a capture dependency no rule reads
  bootstrap                            run the pending projection bootstrap or registry change now (synchrod runs it too)`

func runRegistry(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	if len(args) == 0 {
		return errors.New(registryUsage)
	}
	switch args[0] {
	case "list":
		return registryList(ctx, args[1:], out)
	case "reconfigure", "unregister", "unregister-dependency":
		return registryChange(ctx, args[0], args[1:], out)
	case "bootstrap":
		return registryBootstrap(ctx, args[1:], out, log)
	}
	return helpOr(args, out, registryUsage, errors.New(registryUsage))
}

func registryList(ctx context.Context, args []string, out io.Writer) error {
	c, pool, err := parseDBCommand(ctx, "registry list", args, 0, registryUsage)
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
			orDash(r.PushPolicy.Valid, r.PushPolicy.String), r.State})
	}
	return c.output(out, rels, []string{"relation_id", "kind", "relation", "oid", "key", "generation", "table_id", "wire_name", "push", "state"}, rows)
}

// registryChange records a reconfiguration or unregistration; the capture
// worker activates it (with a bootstrap first when it needs one).
func registryChange(ctx context.Context, sub string, args []string, out io.Writer) error {
	npos := 1
	if sub == "reconfigure" {
		npos = -1
	}
	c, pool, err := parseDBCommand(ctx, "registry "+sub, args, npos, registryUsage)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := db.New(pool)
	var id string
	switch sub {
	case "reconfigure":
		if len(c.args) < 2 || len(c.args) > 3 {
			return errors.New(registryUsage)
		}
		opts := "{}"
		if len(c.args) == 3 {
			opts = c.args[2]
		}
		id, err = q.ReconfigureTable(ctx, db.ReconfigureTableParams{Relation: c.args[0], ScopeRule: []byte(c.args[1]), Options: []byte(opts)})
	case "unregister":
		id, err = q.UnregisterTable(ctx, c.args[0])
	default:
		id, err = q.UnregisterDependency(ctx, c.args[0])
	}
	if err != nil {
		return err
	}
	res := map[string]string{"relation": c.args[0], "change": id}
	switch id {
	case "":
		res["state"] = "applied to the registry; capture is blocked: recover it with synchroctl reset start --activate"
	default:
		res["state"] = "recorded; the capture worker activates it in source order (synchroctl reset status)"
	}
	return c.output(out, res, []string{"relation", "change", "state"}, [][]string{{res["relation"], orDash(id != "", id), res["state"]}})
}

// registryBootstrap runs the pending bootstrap (or registry change) through
// its activation by the capture worker and its retirement.
func registryBootstrap(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	c, pool, err := parseDBCommand(ctx, "registry bootstrap", args, 0, registryUsage)
	if err != nil {
		return err
	}
	pool.Close()
	res, err := reset.Bootstrap(ctx, reset.Config{DatabaseURL: c.common.DatabaseURL, Log: log})
	if err != nil {
		return err
	}
	phase := res.Phase
	if phase == "" {
		phase = "nothing pending"
	}
	return c.output(out, res, []string{"bootstrap", "phase"}, [][]string{{orDash(res.ResetID != "", res.ResetID), phase}})
}
