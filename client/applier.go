package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// applier applies server state to the replica inside one SDK transaction (the
// applying flag is set, so the capture triggers stay silent).
type applier struct {
	ctx context.Context
	tx  *preparedTx
	m   *manifest
}

// apply runs fn in one write transaction with the applying flag set.
func (c *Client) apply(ctx context.Context, fn func(a *applier) error) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE _synchro_state SET applying = 1`); err != nil {
		return err
	}
	if err := fn(&applier{ctx: ctx, tx: newPreparedTx(tx), m: c.schema}); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE _synchro_state SET applying = 0`); err != nil {
		return err
	}
	return tx.Commit()
}

// key converts a wire primary key (a JSON object) of t to its rowKey.
func (a *applier) key(t *table, pk json.RawMessage) (rowKey, error) {
	return keyOf(a.ctx, a.tx, t, pk)
}

// serverKey is the key of row, a row the server answered a push of the row
// of key k with. The server answers under its canonical key (a uuid in lower
// case with hyphens, whatever case it was sent in), the key pull delivers the
// row under; when that is not k, the local row (replacing any local row of
// that key), its queued mutations and its image move to it, so the replica
// keeps one row.
func (a *applier) serverKey(t *table, k rowKey, row json.RawMessage) (rowKey, error) {
	sk, err := a.key(t, row)
	if err != nil || sk.text == k.text {
		return sk, err
	}
	if _, err := a.tx.ExecContext(a.ctx, t.rekeySQL, append(append([]any{}, sk.vals...), k.vals...)...); err != nil {
		return sk, err
	}
	for _, side := range []string{"_synchro_queue", "_synchro_images"} {
		if _, err := a.tx.ExecContext(a.ctx, `UPDATE OR REPLACE `+side+` SET pk = ? WHERE tbl = ? AND pk = ?`, sk.text, t.Name, k.text); err != nil {
			return sk, err
		}
	}
	return sk, nil
}

// pending reports whether local mutations of the row are queued.
func (a *applier) pending(t *table, k rowKey) (bool, error) {
	var ok bool
	err := a.tx.QueryRowContext(a.ctx, `SELECT EXISTS (SELECT 1 FROM _synchro_queue WHERE tbl = ? AND pk = ?)`, t.Name, k.text).Scan(&ok)
	return ok, err
}

// held reports whether any scope holds the row.
func (a *applier) held(t *table, k rowKey) (bool, error) {
	var ok bool
	err := a.tx.QueryRowContext(a.ctx, `SELECT EXISTS (SELECT 1 FROM _synchro_rows WHERE tbl = ? AND pk = ?)`, t.Name, k.text).Scan(&ok)
	return ok, err
}

// image is the last known server image of the row (nil when none).
func (a *applier) image(t *table, k rowKey) (json.RawMessage, error) {
	var row string
	err := a.tx.QueryRowContext(a.ctx, `SELECT row FROM _synchro_images WHERE tbl = ? AND pk = ?`, t.Name, k.text).Scan(&row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return json.RawMessage(row), err
}

// setImage records the row's last known server image; pushed when it comes from
// a push answer instead of the stream.
func (a *applier) setImage(t *table, k rowKey, row json.RawMessage, version *string, pushed bool) error {
	_, err := a.tx.ExecContext(a.ctx, `INSERT INTO _synchro_images (tbl, pk, row, server_version, pushed) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (tbl, pk) DO UPDATE SET row = excluded.row, server_version = excluded.server_version, pushed = excluded.pushed`,
		t.Name, k.text, string(row), version, pushed)
	return err
}

func (a *applier) dropImage(t *table, k rowKey) error {
	_, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_images WHERE tbl = ? AND pk = ?`, t.Name, k.text)
	return err
}

// writeRow writes a wire row image into the local table.
func (a *applier) writeRow(t *table, row json.RawMessage) error {
	obj, err := decodeObject(row)
	if err != nil {
		return fmt.Errorf("table %s: row: %w", t.Name, err)
	}
	return a.writeObject(t, obj)
}

// writeObject writes a decoded wire row image into the local table.
func (a *applier) writeObject(t *table, obj map[string]json.RawMessage) error {
	vals := make([]any, len(t.Columns))
	for i, c := range t.Columns {
		var err error
		if vals[i], err = toLocal(c.Type, obj[c.Name]); err != nil {
			return fmt.Errorf("table %s column %s: %w", t.Name, c.Name, err)
		}
	}
	_, err := a.tx.ExecContext(a.ctx, t.upsertSQL, vals...)
	return err
}

// resolve makes the local row the server's row (deletes it when row is nil),
// unless local mutations of it are queued: their push resolves the row.
func (a *applier) resolve(t *table, k rowKey, row json.RawMessage) error {
	if p, err := a.pending(t, k); err != nil || p {
		return err
	}
	if row == nil {
		return a.deleteRow(t, k)
	}
	return a.writeRow(t, row)
}

// deleteRow deletes the row from the local table.
func (a *applier) deleteRow(t *table, k rowKey) error {
	_, err := a.tx.ExecContext(a.ctx, t.deleteSQL, k.vals...)
	return err
}

// upsert applies a row state delivered for scope: the scope holds the row at
// that version and checksum, it is the row's last server image, and the local
// row takes it unless local mutations of the row are queued (their push
// resolves the row). A row whose key is not k is refused: the local table and
// the scope's metadata would name different rows.
func (a *applier) upsert(scope string, t *table, k rowKey, row json.RawMessage, version string, checksum uint32) error {
	rk, err := a.key(t, row)
	if err != nil {
		return fmt.Errorf("synchro: the row delivered for key %s: %w", k.text, err)
	}
	if rk.text != k.text {
		return fmt.Errorf("synchro: table %s: the row delivered for key %s has key %s", t.Name, k.text, rk.text)
	}
	if _, err := a.tx.ExecContext(a.ctx, `INSERT INTO _synchro_rows (tbl, pk, scope, server_version, row_checksum) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (tbl, pk, scope) DO UPDATE SET server_version = excluded.server_version, row_checksum = excluded.row_checksum`,
		t.Name, k.text, scope, version, int64(checksum)); err != nil {
		return err
	}
	if err := a.setImage(t, k, row, &version, false); err != nil {
		return err
	}
	return a.resolve(t, k, row)
}

// remove applies the row's leaving scope: once no scope holds it, its image
// goes and the local row is deleted (unless local mutations of it are queued).
func (a *applier) remove(scope string, t *table, k rowKey) error {
	if _, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_rows WHERE tbl = ? AND pk = ? AND scope = ?`, t.Name, k.text, scope); err != nil {
		return err
	}
	return a.forgetUnheld(t, k)
}

// forgetUnheld drops the image and the local row of a row no scope holds.
func (a *applier) forgetUnheld(t *table, k rowKey) error {
	if h, err := a.held(t, k); err != nil || h {
		return err
	}
	if err := a.dropImage(t, k); err != nil {
		return err
	}
	return a.resolve(t, k, nil)
}

// forgetOrphans drops the rows the replica knows only from push answers: once
// every scope has a cursor after a pull (which the capture gate serves only when
// every accepted push of this client is materialized), a row with a server
// image that no scope holds and no queued change is in none of the replica's
// scopes, e.g. an applied insert whose row joined only other users' scopes.
func (a *applier) forgetOrphans() error {
	orphans, err := a.scopeRows(`SELECT i.tbl, i.pk FROM _synchro_images i
		WHERE NOT EXISTS (SELECT 1 FROM _synchro_rows r WHERE r.tbl = i.tbl AND r.pk = i.pk)
		  AND NOT EXISTS (SELECT 1 FROM _synchro_queue q WHERE q.tbl = i.tbl AND q.pk = i.pk)`)
	if err != nil {
		return err
	}
	for _, r := range orphans {
		t := a.m.byName[r[0]]
		if t == nil {
			if _, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_images WHERE tbl = ? AND pk = ?`, r[0], r[1]); err != nil {
				return err
			}
			continue
		}
		k, err := a.key(t, json.RawMessage(r[1]))
		if err != nil {
			return err
		}
		if err := a.forgetUnheld(t, k); err != nil {
			return err
		}
	}
	return nil
}

// scopeRows lists the rows a scope holds, as (table, key text) pairs.
func (a *applier) scopeRows(query string, args ...any) ([][2]string, error) {
	rows, err := a.tx.QueryContext(a.ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var r [2]string
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// dropScope forgets a scope: its cursor and its rows (deleted locally unless
// another scope still holds them).
func (a *applier) dropScope(scope string) error {
	rows, err := a.scopeRows(`SELECT tbl, pk FROM _synchro_rows WHERE scope = ?`, scope)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := a.removeByText(scope, r[0], r[1]); err != nil {
			return err
		}
	}
	if _, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_staging WHERE scope = ?`, scope); err != nil {
		return err
	}
	_, err = a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_scopes WHERE scope = ?`, scope)
	return err
}

// removeByText is remove for a row named by its stored key text.
func (a *applier) removeByText(scope, tbl, pk string) error {
	t := a.m.byName[tbl]
	if t == nil { // a table no longer synced: only the metadata is left
		_, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_rows WHERE tbl = ? AND pk = ? AND scope = ?`, tbl, pk, scope)
		return err
	}
	k, err := a.key(t, json.RawMessage(pk))
	if err != nil {
		return err
	}
	return a.remove(scope, t, k)
}

// setCursor records a scope's cursor (nil: the scope needs a rebuild), adding
// the scope when it is new.
func (a *applier) setCursor(scope string, cursor *string) error {
	_, err := a.tx.ExecContext(a.ctx, `INSERT INTO _synchro_scopes (scope, cursor) VALUES (?, ?)
		ON CONFLICT (scope) DO UPDATE SET cursor = excluded.cursor`, scope, cursor)
	return err
}

// addScope adds a scope with no cursor unless it is held already.
func (a *applier) addScope(scope string) error {
	_, err := a.tx.ExecContext(a.ctx, `INSERT INTO _synchro_scopes (scope, cursor) VALUES (?, NULL) ON CONFLICT (scope) DO NOTHING`, scope)
	return err
}

// scopeChanges applies a scope diff: added scopes wait for a rebuild, removed
// ones are dropped, and held scopes listed in rebuild lose their cursor.
func (a *applier) scopeChanges(diff scopeDiff, rebuild []string, ssv int64) error {
	for _, s := range diff.Add {
		if err := a.addScope(s.ID); err != nil {
			return err
		}
	}
	for _, s := range diff.Remove {
		if err := a.dropScope(s); err != nil {
			return err
		}
	}
	for _, s := range rebuild {
		if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_scopes SET cursor = NULL WHERE scope = ?`, s); err != nil {
			return err
		}
	}
	_, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_client SET scope_set_version = ?`, ssv)
	return err
}

// page applies one pull page. It serves only the scopes asked to resume (sent
// with a cursor) and not listed in rebuild: whatever it carries for another
// scope (one it adds, one waiting for a rebuild) is ignored, since such a scope
// is rebuilt, and a cursor taken for it would mark it synced without the rows
// before that cursor.
func (a *applier) page(requested map[string]cursorRef, resp *pullResponse, rep *Report) error {
	rebuild := map[string]bool{}
	for _, s := range resp.Rebuild {
		rebuild[s] = true
	}
	served := func(scope string) bool { return requested[scope].Cursor != nil && !rebuild[scope] }
	for _, ch := range resp.Changes {
		if !served(ch.Scope) {
			continue
		}
		t := a.m.byName[ch.Table]
		if t == nil {
			return fmt.Errorf("synchro: pull delivered table %q, which is not in the schema", ch.Table)
		}
		k, err := a.key(t, ch.PK)
		if err != nil {
			return err
		}
		switch ch.Op {
		case "upsert":
			err = a.upsert(ch.Scope, t, k, ch.Row, ch.ServerVersion, ch.RowChecksum)
		case "delete":
			err = a.remove(ch.Scope, t, k)
		default:
			err = fmt.Errorf("synchro: pull delivered unknown op %q", ch.Op)
		}
		if err != nil {
			return err
		}
		rep.Pulled++
	}
	if err := a.scopeChanges(resp.ScopeUpdates, resp.Rebuild, resp.ScopeSetVersion); err != nil {
		return err
	}
	for s, cur := range resp.ScopeCursors {
		if served(s) {
			if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_scopes SET cursor = ? WHERE scope = ?`, cur, s); err != nil {
				return err
			}
		}
	}
	if resp.HasMore {
		return nil
	}
	// Every served scope (given a cursor) is verified; one without a checksum
	// is rebuilt like a mismatch.
	verify := map[string]bool{}
	for s := range resp.Checksums {
		verify[s] = true
	}
	for s := range resp.ScopeCursors {
		verify[s] = true
	}
	for s := range verify {
		if !served(s) {
			continue
		}
		raw, match := resp.Checksums[s]
		if match {
			want, err := parseChecksum(raw)
			if err != nil {
				return fmt.Errorf("synchro: scope %s: %w", s, err)
			}
			got, err := scopeSum(a.ctx, a.tx, "_synchro_rows", s)
			if err != nil {
				return err
			}
			match = got == want
		}
		if !match {
			if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_scopes SET cursor = NULL WHERE scope = ?`, s); err != nil {
				return err
			}
		}
	}
	// Every scope is now at this page's position, where all the scopes holding a
	// row hold its current version. A scope holding a row at another version
	// than the row's image means the image is stale: a scope whose cursor was
	// behind another's (one rebuilt later, say) delivered an older version of a
	// row after the newer one had arrived. Such scopes are rebuilt, which
	// rewrites the row from the server. Rows with queued local changes are left
	// to their push, and images from a push answer to the stream: a conflict's
	// server_row can be a version the stream has not reached yet (a direct
	// write not yet captured), which the stream then delivers.
	_, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_scopes SET cursor = NULL WHERE scope IN (
		SELECT r.scope FROM _synchro_rows r JOIN _synchro_images i ON i.tbl = r.tbl AND i.pk = r.pk
		WHERE r.server_version IS NOT i.server_version AND NOT i.pushed
		  AND NOT EXISTS (SELECT 1 FROM _synchro_queue q WHERE q.tbl = r.tbl AND q.pk = r.pk))`)
	return err
}

// replaceScope makes the staged rebuild the scope's contents: rows it no longer
// holds leave it, staged rows are applied, and the cursor is set. The scope's
// row metadata and the rows' server images are copied from staging in two
// statements, and so are the local rows of tables SQLite can convert by itself
// (table.stagedSQL); those of other tables are written one by one (their
// values converted from wire form in Go). Rows with queued local changes are
// left to their push. A staged row whose key is not its record's key fails the whole
// replacement: the local table and the scope's metadata would name different
// rows.
func (a *applier) replaceScope(scope, cursor string) error {
	gone, err := a.scopeRows(`SELECT tbl, pk FROM _synchro_rows r WHERE scope = ?
		AND NOT EXISTS (SELECT 1 FROM _synchro_staging s WHERE s.scope = r.scope AND s.tbl = r.tbl AND s.pk = r.pk)`, scope)
	if err != nil {
		return err
	}
	for _, r := range gone {
		if err := a.removeByText(scope, r[0], r[1]); err != nil {
			return err
		}
	}
	if _, err := a.tx.ExecContext(a.ctx, `INSERT INTO _synchro_rows (tbl, pk, scope, server_version, row_checksum)
		SELECT tbl, pk, scope, server_version, row_checksum FROM _synchro_staging WHERE scope = ?
		ON CONFLICT (tbl, pk, scope) DO UPDATE SET server_version = excluded.server_version, row_checksum = excluded.row_checksum`, scope); err != nil {
		return err
	}
	if _, err := a.tx.ExecContext(a.ctx, `INSERT INTO _synchro_images (tbl, pk, row, server_version, pushed)
		SELECT tbl, pk, row, server_version, 0 FROM _synchro_staging WHERE scope = ?
		ON CONFLICT (tbl, pk) DO UPDATE SET row = excluded.row, server_version = excluded.server_version, pushed = excluded.pushed`, scope); err != nil {
		return err
	}
	// Tables whose rows SQLite can write from staging by itself (prepareStaged);
	// the others are written row by row below.
	var byRow []string
	for _, t := range a.m.Tables {
		if t.stagedSQL == "" {
			byRow = append(byRow, t.Name)
			continue
		}
		var wrong string
		switch err := a.tx.QueryRowContext(a.ctx, t.stagedKeySQL, scope).Scan(&wrong); {
		case err == nil:
			return fmt.Errorf("synchro: table %s: the row delivered for key %s has another key", t.Name, wrong)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if _, err := a.tx.ExecContext(a.ctx, t.stagedSQL, scope); err != nil {
			return err
		}
	}
	tables, _ := json.Marshal(byRow)
	after := [2]string{"", ""}
	for len(byRow) > 0 {
		type staged struct {
			tbl, pk, row string
			pending      bool
		}
		rows, err := a.tx.QueryContext(a.ctx, `SELECT s.tbl, s.pk, s.row,
			EXISTS (SELECT 1 FROM _synchro_queue q WHERE q.tbl = s.tbl AND q.pk = s.pk)
			FROM _synchro_staging s WHERE s.scope = ? AND s.tbl IN (SELECT value FROM json_each(?))
			  AND (s.tbl, s.pk) > (?, ?) ORDER BY s.tbl, s.pk LIMIT 500`, scope, string(tables), after[0], after[1])
		if err != nil {
			return err
		}
		var chunk []staged
		for rows.Next() {
			var s staged
			if err := rows.Scan(&s.tbl, &s.pk, &s.row, &s.pending); err != nil {
				rows.Close()
				return err
			}
			chunk = append(chunk, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(chunk) == 0 {
			break
		}
		for _, s := range chunk {
			t := a.m.byName[s.tbl]
			obj, err := decodeObject([]byte(s.row))
			if err != nil {
				return fmt.Errorf("table %s: row: %w", t.Name, err)
			}
			if err := checkRowKey(t, s.pk, obj); err != nil {
				return err
			}
			if !s.pending {
				if err := a.writeObject(t, obj); err != nil {
					return err
				}
			}
		}
		after = [2]string{chunk[len(chunk)-1].tbl, chunk[len(chunk)-1].pk}
	}
	if _, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_staging WHERE scope = ?`, scope); err != nil {
		return err
	}
	return a.setCursor(scope, &cursor)
}
