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
	"reflect"
	"regexp"
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

	types    map[string]string // column -> portable type
	nullable map[string]bool   // column -> NULL allowed on the server
	// SQL built once per table.
	upsertSQL, deleteSQL, keySQL, rekeySQL string
	// stagedSQL and stagedKeySQL, when set, write the local rows of a
	// rebuilt scope straight from staging and find a staged row whose key is
	// not its record's (see sqlReadable).
	stagedSQL, stagedKeySQL string
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
		t.types, t.nullable = map[string]string{}, map[string]bool{}
		for _, c := range t.Columns {
			t.nullable[c.Name] = c.Nullable
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
	t.prepareStaged(cols, keys, conflict)
}

// sqlReadable are the portable types whose local value is exactly what
// SQLite's json_extract reads from the wire value (toLocal): strings, integers,
// and booleans as 1 and 0. A column of another type (float, json, bytes)
// needs toLocal in Go.
var sqlReadable = map[string]bool{"string": true, "int": true, "int64": true, "boolean": true,
	"datetime": true, "date": true, "time": true}

var plainName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// prepareStaged builds stagedSQL and stagedKeySQL when every column of t is
// sqlReadable under a plain name: writing a rebuilt scope's rows is then one
// statement instead of a decode and a write per row. Rows with queued local
// changes are left to their push, as resolve leaves them.
func (t *table) prepareStaged(cols, keys []string, conflict string) {
	extract := func(col string) string { return fmt.Sprintf("json_extract(s.row, '$.%s')", col) }
	values := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		if !sqlReadable[c.Type] || !plainName.MatchString(c.Name) {
			return
		}
		values[i] = extract(c.Name)
	}
	keyObj := make([]string, len(t.PrimaryKey))
	for i, k := range t.PrimaryKey {
		keyObj[i] = quoteLit(k) + ", " + extract(k)
	}
	from := fmt.Sprintf("FROM _synchro_staging s WHERE s.scope = ? AND s.tbl = %s", quoteLit(t.Name))
	t.stagedSQL = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s %s AND NOT EXISTS (SELECT 1 FROM _synchro_queue q WHERE q.tbl = s.tbl AND q.pk = s.pk) ON CONFLICT (%s) %s",
		quoteIdent(t.Name), strings.Join(cols, ", "), strings.Join(values, ", "), from, strings.Join(keys, ", "), conflict)
	t.stagedKeySQL = fmt.Sprintf("SELECT s.pk %s AND s.pk IS NOT json_object(%s) LIMIT 1", from, strings.Join(keyObj, ", "))
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
		// Only the key is NOT NULL locally: a local insert may leave out a column
		// the server fills with its default (wireColumns does not push it).
		d := quoteIdent(c.Name) + " " + sqliteTypes[c.Type]
		if t.isKey(c.Name) {
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

// rowKey is a row's key in the side tables: SQLite's json_object of the primary
// key columns, the same text the capture triggers compute. vals are the key's
// SQLite values in primary-key order.
type rowKey struct {
	text string
	vals []any
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
		if k.vals[i], err = keyValue(t, col, obj[col]); err != nil {
			return rowKey{}, fmt.Errorf("table %s: primary key %s: %w", t.Name, pk, err)
		}
	}
	err = q.QueryRowContext(ctx, t.keySQL, k.vals...).Scan(&k.text)
	return k, err
}

// keyValue is the SQLite value of key column col of t given as raw.
func keyValue(t *table, col string, raw json.RawMessage) (any, error) {
	v, err := toLocal(t.types[col], raw)
	if err == nil && v != nil {
		return v, nil
	}
	// A key the application stored with another type (e.g. text in an
	// INTEGER column of a composite key): keep it as SQLite holds it, so
	// the row can still be found and reverted.
	var generic any
	if json.Unmarshal(raw, &generic) == nil {
		switch x := generic.(type) {
		case string, float64:
			return x, nil
		}
	}
	return nil, fmt.Errorf("column %s: bad value", col)
}

// checkRowKey fails unless row (a decoded wire row of t) has the key whose
// text (json_object of the key columns, as keyOf computes it) is key.
func checkRowKey(t *table, key string, row map[string]json.RawMessage) error {
	want, err := decodeObject([]byte(key))
	for _, col := range t.PrimaryKey {
		if err != nil {
			break
		}
		var w, g any
		if w, err = keyValue(t, col, want[col]); err == nil {
			if g, err = keyValue(t, col, row[col]); err == nil && !reflect.DeepEqual(w, g) {
				err = errors.New("another key")
			}
		}
	}
	if err != nil {
		return fmt.Errorf("synchro: table %s: the row delivered for key %s has another key", t.Name, key)
	}
	return nil
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
