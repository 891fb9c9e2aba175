package client

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// metadataDDL creates the SDK's side tables:
//   - _synchro_client: the client state (one row);
//   - _synchro_state: the applying flag (one row); set to 1 inside the SDK's own
//     transactions so the capture triggers ignore rows applied from the server;
//   - _synchro_scopes: the held scopes and their cursors (NULL: rebuild);
//   - _synchro_rows: per scope, the rows it holds with server version and row checksum;
//   - _synchro_images: the last known server image of each row (revert target,
//     base_version of local changes); pushed = 1 when it came from a push answer
//     rather than from the stream (a conflict's server_row can be ahead of it);
//   - _synchro_queue: captured local mutations in order; sent = 1 marks the batch
//     in flight, which is resent unchanged (same mutation IDs) until answered;
//   - _synchro_rejections: local changes the server refused;
//   - _synchro_staging: records of rebuilds in progress.
const metadataDDL = `
CREATE TABLE IF NOT EXISTS _synchro_client (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    client_id TEXT NOT NULL,
    schema_version INTEGER,
    schema_hash TEXT,
    manifest TEXT,
    scope_set_version INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS _synchro_state (applying INTEGER NOT NULL);
INSERT INTO _synchro_state (applying) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM _synchro_state);
CREATE TABLE IF NOT EXISTS _synchro_scopes (scope TEXT PRIMARY KEY, cursor TEXT);
CREATE TABLE IF NOT EXISTS _synchro_rows (
    tbl TEXT NOT NULL, pk TEXT NOT NULL, scope TEXT NOT NULL,
    server_version TEXT, row_checksum INTEGER NOT NULL,
    PRIMARY KEY (tbl, pk, scope));
CREATE INDEX IF NOT EXISTS _synchro_rows_scope ON _synchro_rows (scope);
CREATE TABLE IF NOT EXISTS _synchro_images (
    tbl TEXT NOT NULL, pk TEXT NOT NULL, row TEXT NOT NULL, server_version TEXT,
    pushed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tbl, pk));
CREATE TABLE IF NOT EXISTS _synchro_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    mutation_id TEXT NOT NULL UNIQUE,
    tbl TEXT NOT NULL, op TEXT NOT NULL, pk TEXT NOT NULL,
    columns TEXT, base_version TEXT,
    sent INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS _synchro_queue_row ON _synchro_queue (tbl, pk);
CREATE TABLE IF NOT EXISTS _synchro_rejections (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    mutation_id TEXT NOT NULL, tbl TEXT NOT NULL, pk TEXT NOT NULL,
    code TEXT NOT NULL, message TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS _synchro_staging (
    scope TEXT NOT NULL, tbl TEXT NOT NULL, pk TEXT NOT NULL,
    row TEXT NOT NULL, server_version TEXT, row_checksum INTEGER NOT NULL,
    PRIMARY KEY (scope, tbl, pk));
`

// manifest is the server's schema manifest (schema_definition).
type manifest struct {
	Version int64    `json:"version"`
	Hash    string   `json:"hash"`
	Tables  []*table `json:"tables"`

	byName map[string]*table
	raw    []byte
}

// table is one synced table of the manifest.
type table struct {
	Name       string   `json:"name"`
	PrimaryKey []string `json:"primary_key"`
	ReadOnly   bool     `json:"read_only"`
	Columns    []column `json:"columns"`

	types map[string]string // column -> portable type
	// SQL built once per table.
	upsertSQL, deleteSQL, keySQL, rekeySQL string
}

// column is one synced column.
type column struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// sqliteTypes maps the protocol's portable types to SQLite column types.
var sqliteTypes = map[string]string{
	"string": "TEXT", "int": "INTEGER", "int64": "INTEGER", "float": "REAL", "boolean": "INTEGER",
	"datetime": "TEXT", "date": "TEXT", "time": "TEXT", "json": "TEXT", "bytes": "BLOB",
}

// parseManifest decodes and checks a manifest and prepares its tables.
func parseManifest(raw []byte) (*manifest, error) {
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("malformed schema manifest: %w", err)
	}
	m.raw = raw
	m.byName = map[string]*table{}
	// SQLite compares names ignoring case: two tables whose names differ only in
	// case would share one local table, and "_SYNCHRO_queue" is the SDK's queue.
	folded := map[string]bool{}
	for _, t := range m.Tables {
		name := strings.ToLower(t.Name)
		if name == "" || strings.HasPrefix(name, "_synchro_") || strings.HasPrefix(name, "sqlite_") {
			return nil, fmt.Errorf("table name %q cannot be synced locally", t.Name)
		}
		if folded[name] {
			return nil, fmt.Errorf("table %q appears twice (names are compared ignoring case)", t.Name)
		}
		folded[name] = true
		m.byName[t.Name] = t
		t.types = map[string]string{}
		for _, c := range t.Columns {
			if _, ok := sqliteTypes[c.Type]; !ok {
				return nil, fmt.Errorf("table %q column %q: unknown type %q", t.Name, c.Name, c.Type)
			}
			t.types[c.Name] = c.Type
		}
		if len(t.PrimaryKey) == 0 {
			return nil, fmt.Errorf("table %q has no primary key", t.Name)
		}
		for _, k := range t.PrimaryKey {
			if t.types[k] == "" {
				return nil, fmt.Errorf("table %q: primary key column %q is not a column", t.Name, k)
			}
		}
		t.prepare()
	}
	return &m, nil
}

// prepare builds the table's statements.
func (t *table) prepare() {
	cols := make([]string, len(t.Columns))
	marks := make([]string, len(t.Columns))
	var sets []string
	for i, c := range t.Columns {
		cols[i], marks[i] = quoteIdent(c.Name), "?"
		if !t.isKey(c.Name) {
			sets = append(sets, fmt.Sprintf("%s = excluded.%s", quoteIdent(c.Name), quoteIdent(c.Name)))
		}
	}
	keys := make([]string, len(t.PrimaryKey))
	where := make([]string, len(t.PrimaryKey))
	obj := make([]string, len(t.PrimaryKey))
	for i, k := range t.PrimaryKey {
		keys[i] = quoteIdent(k)
		where[i] = quoteIdent(k) + " = ?"
		obj[i] = quoteLit(k) + ", ?"
	}
	t.rekeySQL = fmt.Sprintf("UPDATE OR REPLACE %s SET %s WHERE %s",
		quoteIdent(t.Name), strings.Join(where, ", "), strings.Join(where, " AND "))
	conflict := "DO NOTHING"
	if len(sets) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(sets, ", ")
	}
	t.upsertSQL = fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) %s",
		quoteIdent(t.Name), strings.Join(cols, ", "), strings.Join(marks, ", "), strings.Join(keys, ", "), conflict)
	t.deleteSQL = fmt.Sprintf("DELETE FROM %s WHERE %s", quoteIdent(t.Name), strings.Join(where, " AND "))
	t.keySQL = "SELECT json_object(" + strings.Join(obj, ", ") + ")"
}

func (t *table) isKey(col string) bool {
	for _, k := range t.PrimaryKey {
		if k == col {
			return true
		}
	}
	return false
}

// createSQL is the CREATE TABLE statement of the local table.
func (t *table) createSQL() string {
	defs := make([]string, 0, len(t.Columns)+1)
	for _, c := range t.Columns {
		d := quoteIdent(c.Name) + " " + sqliteTypes[c.Type]
		if !c.Nullable {
			d += " NOT NULL"
		}
		defs = append(defs, d)
	}
	keys := make([]string, len(t.PrimaryKey))
	for i, k := range t.PrimaryKey {
		keys[i] = quoteIdent(k)
	}
	defs = append(defs, "PRIMARY KEY ("+strings.Join(keys, ", ")+")")
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n    %s)", quoteIdent(t.Name), strings.Join(defs, ",\n    "))
}

// decodeObject decodes a JSON object keeping numbers exact.
func decodeObject(raw []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// toLocal converts a wire value of a column of type typ to its SQLite value:
// int/int64 to int64, float to float64, boolean to 0/1, json to its JSON text,
// bytes from base64 to []byte, every other type to its string.
func toLocal(typ string, raw json.RawMessage) (any, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	isString := json.Unmarshal(raw, &s) == nil
	switch typ {
	case "int", "int64":
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return n, nil
		}
	case "float":
		text := string(raw)
		if isString {
			text = s // NaN, Infinity
		}
		if f, err := strconv.ParseFloat(text, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			return f, nil
		}
	case "boolean":
		switch string(raw) {
		case "true":
			return int64(1), nil
		case "false":
			return int64(0), nil
		}
	case "json":
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, err
		}
		return b.String(), nil
	case "bytes":
		if isString {
			return base64.StdEncoding.DecodeString(s)
		}
	default:
		if isString {
			return s, nil
		}
		return string(raw), nil
	}
	return nil, fmt.Errorf("value %s is not a %s", raw, typ)
}

// toWire converts a value as a capture trigger recorded it (a SQLite value in
// JSON; a bytes column as hex text) to the wire value of a column of type typ.
func toWire(typ string, raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return json.RawMessage("null"), nil
	}
	var s string
	isString := json.Unmarshal(raw, &s) == nil
	switch typ {
	case "boolean":
		if !isString {
			f, err := strconv.ParseFloat(string(raw), 64)
			if err != nil {
				return nil, fmt.Errorf("value %s is not a boolean", raw)
			}
			return json.Marshal(f != 0)
		}
		if b, err := strconv.ParseBool(s); err == nil {
			return json.Marshal(b)
		}
	case "json":
		if isString {
			if json.Valid([]byte(s)) {
				return json.RawMessage(s), nil
			}
			return raw, nil // plain text: a JSON string
		}
		return raw, nil
	case "bytes":
		if isString {
			b, err := hex.DecodeString(s)
			if err != nil {
				return nil, err
			}
			return json.Marshal(base64.StdEncoding.EncodeToString(b))
		}
	}
	return raw, nil // numbers and strings as SQLite holds them; the server validates
}

// applier applies server state to the replica inside one SDK transaction (the
// applying flag is set, so the capture triggers stay silent).
type applier struct {
	ctx context.Context
	tx  *sql.Tx
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
	if err := fn(&applier{ctx: ctx, tx: tx, m: c.schema}); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE _synchro_state SET applying = 0`); err != nil {
		return err
	}
	return tx.Commit()
}

// rowKey is a row's key in the side tables: SQLite's json_object of the primary
// key columns, the same text the capture triggers compute. vals are the key's
// SQLite values in primary-key order.
type rowKey struct {
	text string
	vals []any
}

// key converts a wire primary key (a JSON object) of t to its rowKey.
func (a *applier) key(t *table, pk json.RawMessage) (rowKey, error) {
	return keyOf(a.ctx, a.tx, t, pk)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func keyOf(ctx context.Context, q queryer, t *table, pk json.RawMessage) (rowKey, error) {
	obj, err := decodeObject(pk)
	if err != nil {
		return rowKey{}, fmt.Errorf("table %s: primary key %s: %w", t.Name, pk, err)
	}
	k := rowKey{vals: make([]any, len(t.PrimaryKey))}
	for i, col := range t.PrimaryKey {
		v, err := toLocal(t.types[col], obj[col])
		if err != nil || v == nil {
			// A key the application stored with another type (e.g. text in an
			// INTEGER column of a composite key): keep it as SQLite holds it, so
			// the row can still be found and reverted.
			var generic any
			if json.Unmarshal(obj[col], &generic) != nil {
				return rowKey{}, fmt.Errorf("table %s: primary key %s: column %s: bad value", t.Name, pk, col)
			}
			switch x := generic.(type) {
			case string, float64:
				v = x
			default:
				return rowKey{}, fmt.Errorf("table %s: primary key %s: column %s: bad value", t.Name, pk, col)
			}
		}
		k.vals[i] = v
	}
	err = q.QueryRowContext(ctx, t.keySQL, k.vals...).Scan(&k.text)
	return k, err
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
	vals := make([]any, len(t.Columns))
	for i, c := range t.Columns {
		if vals[i], err = toLocal(c.Type, obj[c.Name]); err != nil {
			return fmt.Errorf("table %s column %s: %w", t.Name, c.Name, err)
		}
	}
	_, err = a.tx.ExecContext(a.ctx, t.upsertSQL, vals...)
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

// scopeSum is the sum mod 2^32 of the row checksums a scope holds.
func scopeSum(ctx context.Context, q queryer, table, scope string) (uint32, error) {
	var sum int64
	err := q.QueryRowContext(ctx, `SELECT coalesce(sum(row_checksum), 0) FROM `+table+` WHERE scope = ?`, scope).Scan(&sum)
	return uint32(sum), err
}

// parseChecksum reads a scope checksum sent as a decimal string (or number).
func parseChecksum(raw json.RawMessage) (uint32, error) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("malformed checksum %s", raw)
	}
	return uint32(n), nil
}
