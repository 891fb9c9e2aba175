package client

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Local change capture. Every synced table has AFTER INSERT/UPDATE/DELETE
// triggers that append to _synchro_queue unless _synchro_state.applying is set
// (the SDK's own transactions). The queue holds at most one unsent entry per
// row: a later local change is merged into it (its columns replaced, its op
// adjusted, its base_version kept), so a row edited twice between syncs is
// pushed once with the base_version of the server state the edits started
// from. Entries of the batch in flight (sent = 1) are never changed; a change
// made meanwhile gets its own entry, whose base_version is moved on when the
// batch's entry of the row is applied. When that entry is refused instead, the
// later entry stays queued with its base_version (an update becoming an upsert
// after a refused insert or delete, as if merged into it). Every entry carries
// all synced columns; bytes columns are recorded as hex text (SQLite's JSON
// cannot hold blobs).

// triggerSQL is the DDL of t's capture triggers.
func triggerSQL(t *table) []string {
	name := func(kind string) string { return quoteIdent("_synchro_" + t.Name + "_" + kind) }
	when := "(SELECT applying FROM _synchro_state) = 0"
	same := make([]string, len(t.PrimaryKey))
	for i, k := range t.PrimaryKey {
		same[i] = fmt.Sprintf("OLD.%s IS NEW.%s", quoteIdent(k), quoteIdent(k))
	}
	keySame := strings.Join(same, " AND ")
	return []string{
		fmt.Sprintf("CREATE TRIGGER %s AFTER INSERT ON %s WHEN %s BEGIN\n%s\nEND",
			name("insert"), quoteIdent(t.Name), when, enqueueWrite(t, "NEW", "upsert")),
		fmt.Sprintf("CREATE TRIGGER %s AFTER UPDATE ON %s WHEN %s AND %s BEGIN\n%s\nEND",
			name("update"), quoteIdent(t.Name), when, keySame, enqueueWrite(t, "NEW", "update")),
		// A changed primary key is a delete of the old row and an insert of the new.
		fmt.Sprintf("CREATE TRIGGER %s AFTER UPDATE ON %s WHEN %s AND NOT (%s) BEGIN\n%s\n%s\nEND",
			name("rekey"), quoteIdent(t.Name), when, keySame, enqueueDelete(t, "OLD"), enqueueWrite(t, "NEW", "upsert")),
		fmt.Sprintf("CREATE TRIGGER %s AFTER DELETE ON %s WHEN %s BEGIN\n%s\nEND",
			name("delete"), quoteIdent(t.Name), when, enqueueDelete(t, "OLD")),
	}
}

// dropTriggerSQL drops t's capture triggers.
func dropTriggerSQL(t *table) []string {
	var out []string
	for _, kind := range []string{"insert", "update", "rekey", "delete"} {
		out = append(out, "DROP TRIGGER IF EXISTS "+quoteIdent("_synchro_"+t.Name+"_"+kind))
	}
	return out
}

// pkExpr is the row key of row (NEW or OLD): json_object of the key columns.
func pkExpr(t *table, row string) string {
	parts := make([]string, len(t.PrimaryKey))
	for i, k := range t.PrimaryKey {
		parts[i] = quoteLit(k) + ", " + row + "." + quoteIdent(k)
	}
	return "json_object(" + strings.Join(parts, ", ") + ")"
}

// columnsExpr is the JSON object of row's non-key columns as the queue records them.
func columnsExpr(t *table, row string) string {
	var parts []string
	for _, c := range t.Columns {
		if t.isKey(c.Name) {
			continue
		}
		ref := row + "." + quoteIdent(c.Name)
		v := fmt.Sprintf("CASE WHEN typeof(%[1]s) = 'blob' THEN hex(%[1]s) ELSE %[1]s END", ref)
		if c.Type == "bytes" {
			v = fmt.Sprintf("CASE WHEN %[1]s IS NULL THEN NULL ELSE hex(%[1]s) END", ref)
		}
		parts = append(parts, quoteLit(c.Name)+", "+v)
	}
	return "json_object(" + strings.Join(parts, ", ") + ")"
}

// enqueueWrite records an insert (op upsert) or update (op update) of row.
func enqueueWrite(t *table, row, op string) string {
	tbl, pk, cols := quoteLit(t.Name), pkExpr(t, row), columnsExpr(t, row)
	merged := "'upsert'"
	if op == "update" {
		merged = "CASE op WHEN 'update' THEN 'update' ELSE 'upsert' END"
	}
	return fmt.Sprintf(`UPDATE _synchro_queue SET op = %[4]s, columns = %[3]s WHERE tbl = %[1]s AND pk = %[2]s AND sent = 0;
INSERT INTO _synchro_queue (mutation_id, tbl, op, pk, columns, base_version)
SELECT lower(hex(randomblob(16))), %[1]s, %[5]s, %[2]s, %[3]s,
       (SELECT server_version FROM _synchro_images WHERE tbl = %[1]s AND pk = %[2]s)
WHERE NOT EXISTS (SELECT 1 FROM _synchro_queue WHERE tbl = %[1]s AND pk = %[2]s AND sent = 0);`,
		tbl, pk, cols, merged, quoteLit(op))
}

// enqueueDelete records a delete of row. A row the server never had (no image,
// nothing in flight) only loses its unsent insert.
func enqueueDelete(t *table, row string) string {
	tbl, pk := quoteLit(t.Name), pkExpr(t, row)
	return fmt.Sprintf(`DELETE FROM _synchro_queue WHERE tbl = %[1]s AND pk = %[2]s AND sent = 0 AND op = 'upsert' AND base_version IS NULL
  AND NOT EXISTS (SELECT 1 FROM _synchro_queue WHERE tbl = %[1]s AND pk = %[2]s AND sent = 1)
  AND NOT EXISTS (SELECT 1 FROM _synchro_images WHERE tbl = %[1]s AND pk = %[2]s);
UPDATE _synchro_queue SET op = 'delete', columns = NULL WHERE tbl = %[1]s AND pk = %[2]s AND sent = 0;
INSERT INTO _synchro_queue (mutation_id, tbl, op, pk, columns, base_version)
SELECT lower(hex(randomblob(16))), %[1]s, 'delete', %[2]s, NULL,
       (SELECT server_version FROM _synchro_images WHERE tbl = %[1]s AND pk = %[2]s)
WHERE NOT EXISTS (SELECT 1 FROM _synchro_queue WHERE tbl = %[1]s AND pk = %[2]s AND sent = 0)
  AND (EXISTS (SELECT 1 FROM _synchro_images WHERE tbl = %[1]s AND pk = %[2]s)
       OR EXISTS (SELECT 1 FROM _synchro_queue WHERE tbl = %[1]s AND pk = %[2]s AND sent = 1));`, tbl, pk)
}

// installSchema switches the replica to manifest m. replace (schema action
// replace) creates the tables that are new and drops the ones that are gone
// with their metadata. reset (rebuild_local) drops every synced table and all
// row metadata, discards queued local mutations (recording each as a rejection
// with code schema_reset) and marks every scope for a rebuild. Triggers are
// recreated for every table.
func (c *Client) installSchema(ctx context.Context, m *manifest, reset bool) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	exec := func(q string, args ...any) error {
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("synchro: installing the schema: %w", err)
		}
		return nil
	}
	if reset {
		if err := exec(`INSERT INTO _synchro_rejections (mutation_id, tbl, pk, code, message, at)
			SELECT mutation_id, tbl, pk, 'schema_reset', 'the local schema was rebuilt; the change was discarded', ?
			FROM _synchro_queue ORDER BY seq`, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
			return err
		}
	}
	var old []*table
	if c.schema != nil {
		old = c.schema.Tables
	}
	for _, t := range old {
		if !reset && m.byName[t.Name] != nil {
			continue
		}
		for _, q := range append(dropTriggerSQL(t), "DROP TABLE IF EXISTS "+quoteIdent(t.Name)) {
			if err := exec(q); err != nil {
				return err
			}
		}
		for _, side := range []string{"_synchro_rows", "_synchro_images", "_synchro_queue", "_synchro_staging"} {
			if err := exec("DELETE FROM "+side+" WHERE tbl = ?", t.Name); err != nil {
				return err
			}
		}
	}
	if reset {
		for _, t := range m.Tables {
			if err := exec("DROP TABLE IF EXISTS " + quoteIdent(t.Name)); err != nil {
				return err
			}
		}
		for _, q := range []string{
			`DELETE FROM _synchro_queue`, `DELETE FROM _synchro_rows`, `DELETE FROM _synchro_images`,
			`DELETE FROM _synchro_staging`, `UPDATE _synchro_scopes SET cursor = NULL`,
		} {
			if err := exec(q); err != nil {
				return err
			}
		}
	}
	for _, t := range m.Tables {
		stmts := append([]string{t.createSQL()}, dropTriggerSQL(t)...)
		for _, q := range append(stmts, triggerSQL(t)...) {
			if err := exec(q); err != nil {
				return err
			}
		}
	}
	if err := exec(`UPDATE _synchro_client SET schema_version = ?, schema_hash = ?, manifest = ?`, m.Version, m.Hash, string(m.raw)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	c.schemaMu.Lock()
	c.schema = m
	c.schemaMu.Unlock()
	return nil
}
