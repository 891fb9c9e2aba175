package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// pushTypesSetup is a table with a column of every portable type (and of each
// PostgreSQL type behind the string, int, float, datetime and json ones).
const pushTypesSetup = `CREATE TYPE app.mood AS ENUM ('happy', 'sad');
	CREATE TABLE app.kinds (id text PRIMARY KEY, owner_id text NOT NULL,
		s text, vc varchar(10), ch character(4), u uuid, nm name, e app.mood,
		i2 smallint, i4 integer, i8 bigint, f8 double precision, f4 real, num numeric, b boolean,
		tstz timestamptz, ts timestamp, d date, tm time, ttz timetz, j jsonb, js json, bin bytea);
	SELECT synchro.register_table('app.kinds', '{"kind":"column","template":"user:{owner_id}"}')`

// TestSyncPushRefusesWrongJSONTypes: a value whose JSON type is not its
// column's wire form is validation_failed naming the column, never echoing the
// value, and writes nothing; PostgreSQL used to coerce it (123 into text stored
// as "123", "12" into an integer, 1 and "yes" into a boolean, a number into
// bytea, "now" and "epoch" into a timestamp). The rest of the batch applies.
func TestSyncPushRefusesWrongJSONTypes(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, pushTypesSetup+`;
		INSERT INTO app.kinds (id, owner_id, s, i4, b, tstz, bin) VALUES ('t1', 'u1', 'keep', 7, false, '2026-01-02 03:04:05+00', '\x01')`)
	e.connect(t, "u1", "c1")
	before := queryText(t, e.d, `SELECT k::text FROM app.kinds k WHERE id = 't1'`)
	version := queryText(t, e.d, `SELECT version FROM synchro.row_head WHERE key = 't1'`)

	cases := []struct {
		col string
		val any
	}{
		{"s", 123}, {"s", true}, {"s", map[string]any{"a": 1}}, {"s", []any{"x"}}, {"s", 1.5},
		{"vc", 5}, {"ch", false}, {"u", 1}, {"nm", []any{}}, {"e", 1},
		{"i4", "12"}, {"i4", true}, {"i2", "-3"}, {"i8", "9007199254740993"}, {"i4", 1.5}, {"i4", 3e10},
		{"f8", "1.5"}, {"f8", "nan"}, {"f8", "inf"}, {"f8", "infinity"}, {"f4", " NaN"}, {"num", "12.5"}, {"num", false},
		{"b", 1}, {"b", 0}, {"b", "yes"}, {"b", "true"},
		{"tstz", "now"}, {"tstz", " NOW "}, {"tstz", "today"}, {"tstz", "tomorrow"}, {"tstz", "yesterday"},
		{"tstz", "epoch"}, {"tstz", "today 12:00"}, {"tstz", "2026-01-01 allballs"}, {"tstz", 1700000000},
		{"ts", "Epoch"}, {"ts", "tomorrow 10:00"}, {"d", "today"}, {"d", "yesterday"}, {"d", 20260101},
		{"tm", "allballs"}, {"tm", "now"}, {"ttz", "allballs"},
		{"bin", 123}, {"bin", true}, {"bin", []any{"AA=="}}, {"bin", "not base64!"},
	}
	muts := []map[string]any{mut("good-first", "kinds", "insert", map[string]any{"id": "t2"}, map[string]any{"owner_id": "u1", "s": "first"})}
	for i, c := range cases {
		op, id := "update", "t1"
		if i%3 == 0 { // some as inserts of a new row
			op, id = "insert", fmt.Sprintf("new%d", i)
		}
		cols := map[string]any{c.col: c.val}
		if op == "insert" {
			cols["owner_id"] = "u1"
		}
		muts = append(muts, mut(fmt.Sprintf("bad%d", i), "kinds", op, map[string]any{"id": id}, cols))
		if i == len(cases)/2 {
			muts = append(muts, mut("good-middle", "kinds", "update", map[string]any{"id": "t2"}, map[string]any{"i4": 5}))
		}
	}
	muts = append(muts, mut("good-last", "kinds", "insert", map[string]any{"id": "t3"},
		map[string]any{"owner_id": "u1", "s": "last", "f8": "-Infinity", "tstz": "infinity", "d": "-infinity", "j": "now"}))
	resp := e.push(t, "u1", "c1", muts...)

	for i, c := range cases {
		id := fmt.Sprintf("bad%d", i)
		list, o := outcome(t, resp, id)
		if list != "rejected" || o["status"] != "rejected" || o["code"] != "validation_failed" {
			t.Errorf("%s (%s = %s): %s %v, want validation_failed", id, c.col, mustMarshal(t, c.val), list, o)
			continue
		}
		msg, _ := o["message"].(string)
		if !strings.Contains(msg, fmt.Sprintf("column %q", c.col)) {
			t.Errorf("%s (%s = %s): message %q does not name the column", id, c.col, mustMarshal(t, c.val), msg)
		}
		raw, isString := c.val.(string)
		if strings.Contains(msg, mustMarshal(t, c.val)) || (isString && len(raw) >= 3 && strings.Contains(msg, raw)) {
			t.Errorf("%s: message %q echoes the value %s", id, msg, mustMarshal(t, c.val))
		}
	}
	for _, id := range []string{"good-first", "good-middle", "good-last"} {
		if list, o := outcome(t, resp, id); list != "accepted" || o["server_version"] == nil {
			t.Errorf("%s: %s %v, want applied", id, list, o)
		}
	}
	if got := queryText(t, e.d, `SELECT k::text FROM app.kinds k WHERE id = 't1'`); got != before {
		t.Errorf("t1 after the refused updates: %s, want %s", got, before)
	}
	if got := queryText(t, e.d, `SELECT version FROM synchro.row_head WHERE key = 't1'`); got != version {
		t.Errorf("t1's version moved: a refused update wrote")
	}
	if got := rowsOf(t, e.d, `SELECT id FROM app.kinds ORDER BY id`); !slices.Equal(got, []string{"t1", "t2", "t3"}) {
		t.Errorf("rows after the batch: %v, want t1 t2 t3 (no refused insert written)", got)
	}
	if got := queryText(t, e.d, `SELECT concat_ws(' ', s, i4, f8, tstz, d, j) FROM app.kinds WHERE id = 't2'`); got != "first 5" {
		t.Errorf("t2: %q, want first 5", got)
	}
	if got := queryText(t, e.d, `SELECT concat_ws(' ', s, f8, tstz, d, j) FROM app.kinds WHERE id = 't3'`); got != `last -Infinity infinity -infinity "now"` {
		t.Errorf("t3: %q", got)
	}
	waitMaterialized(t, e.d)
}

// TestSyncPushTakesBackWhatPullEmits: every value pull emits, pushed back
// unchanged as an update of its row, is applied and leaves the row as it was:
// NaN and the infinities (float, real, numeric), infinite, BC and five-digit
// year dates and timestamps, 24:00, time zone offsets, bytea (empty too), json
// scalars and nested unicode, enum, character(n) padding, integer bounds,
// NULLs. The one change: a negative zero comes back as zero (a JSON number in
// jsonb is a numeric, which has no negative zero; pull already emits it as 0).
func TestSyncPushTakesBackWhatPullEmits(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, pushTypesSetup+`;
		INSERT INTO app.kinds VALUES
		('r1', 'u1', E'h\u00e9llo \U0001F30D "q" \\ \t end', 'v', 'ab', '0a0b0c0d-0000-4000-8000-00000000000f', 'nm', 'happy',
		 -32768, 2147483647, 9223372036854775807, 0.1, 1.5, 12.50, true,
		 '2026-02-03 04:05:06.123456+02', '2026-02-03 04:05:06.123456', '2026-02-03', '04:05:06.5', '04:05:06+02',
		 '{"a": [1, "x", null, {"ü": "🌍 \"q\" \\ end"}]}', '[1, 2.5, "s"]', '\x00ff10'),
		('r2', 'u1', '', '', '', NULL, '', 'sad', 32767, -2147483648, -9223372036854775808, 'NaN', 'Infinity', 'NaN', false,
		 'infinity', '-infinity', 'infinity', '24:00:00', '00:00:00+15:59', '"just a string"', 'true', '\x'),
		('r3', 'u1', NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, '-Infinity', '-0', 'Infinity', NULL,
		 '-infinity', 'infinity', '-infinity', '00:00:00', '23:59:59.999999-15:59', '12.5', '-1.5E+3', NULL),
		('r4', 'u1', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '-0', 'NaN', '-Infinity', NULL,
		 '0044-03-15 12:00:00+00 BC', '4713-01-01 00:00:00 BC', '0001-01-01 BC', NULL, NULL, '[]', '{}', NULL),
		('r5', 'u1', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1.7976931348623157e308, 3.4028235e38,
		 '123456789012345678901234567890.123456789', NULL,
		 '10000-01-01 00:00:00+00', '294276-12-31 23:59:59.999999', '5874897-12-31', NULL, NULL, '{"k": {"deep": [[]]}}', '-1e-5', NULL),
		('r6', 'u1', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 5e-324, 1.4e-45, 0.000000000000000000001, NULL,
		 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		('r7', 'u1', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`)
	e.connect(t, "u1", "c1")
	// Stored values, with a negative zero read as zero (-0 + 0 is 0) and a json
	// value as jsonb (push carries JSON as jsonb: -1e-5 comes back -0.00001).
	const stored = `SELECT string_agg(format('%s', row(k.id, k.owner_id, s, vc, ch, u, nm, e, i2, i4, i8, f8 + 0, f4 + 0, num,
		b, tstz, ts, d, tm, ttz, j, js::jsonb, bin)), E'\n' ORDER BY k.id) FROM app.kinds k`
	before := queryText(t, e.d, stored)

	pulled := e.exactRows(t, "u1", "c1", "user:u1")
	if len(pulled) != 7 {
		t.Fatalf("pulled %d rows, want 7", len(pulled))
	}
	for id, col := range map[string]string{"r3": "f4", "r4": "f8"} {
		// (Were it -0, push would store 0: the round trip below would fail.)
		if got := string(pulled[id].row[col]); got != "0" {
			t.Fatalf("pull emits the negative zero %s.%s as %s, want 0", id, col, got)
		}
	}
	var muts []map[string]any
	for _, id := range slices.Sorted(maps.Keys(pulled)) {
		cols := map[string]any{}
		for k, v := range pulled[id].row {
			if k != "id" {
				cols[k] = v
			}
		}
		m := mut(id, "kinds", "update", map[string]any{"id": id}, cols)
		m["base_version"] = pulled[id].version
		muts = append(muts, m)
	}
	resp := e.push(t, "u1", "c1", muts...)
	for _, m := range muts {
		id := m["mutation_id"].(string)
		if list, o := outcome(t, resp, id); list != "accepted" || o["status"] != "applied" {
			t.Errorf("%s pushed back as pulled (%s): %s %v, want applied", id, mustMarshal(t, m["columns"]), list, o)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if after := queryText(t, e.d, stored); after != before {
		t.Fatalf("rows after pushing back what pull emits:\n%s\nwant\n%s", after, before)
	}
	waitMaterialized(t, e.d)
	again := e.exactRows(t, "u1", "c1", "user:u1")
	for id, r := range pulled {
		if got, want := looseJSON(t, again[id].row), looseJSON(t, r.row); got != want {
			t.Errorf("%s pulled after the push back: %s, before it: %s", id, got, want)
		}
	}
}

// looseJSON is row as JSON with its numbers read as float64 (a json column's
// -1e-5 equals -0.00001).
func looseJSON(t *testing.T, row map[string]json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(mustMarshal(t, row)), &v); err != nil {
		t.Fatal(err)
	}
	return mustMarshal(t, v)
}

// exactRow is one rebuilt row with its values as the wire sent them.
type exactRow struct {
	row     map[string]json.RawMessage
	version string
}

// exactRows rebuilds scope for client in one page and returns its kinds rows by
// id, values untouched (a bigint stays exact, -0 stays -0).
func (e *syncEnv) exactRows(t *testing.T, user, client, scope string) map[string]exactRow {
	t.Helper()
	r := e.post(t, user, "/sync/rebuild", map[string]any{"client_id": client, "scope": scope, "cursor": nil, "limit": 1000})
	if requireOK(t, "rebuild", r)["has_more"] != false {
		t.Fatalf("rebuild of %s does not fit one page", scope)
	}
	var body struct {
		Records []struct {
			Table   string                     `json:"table"`
			PK      map[string]string          `json:"pk"`
			Row     map[string]json.RawMessage `json:"row"`
			Version string                     `json:"server_version"`
		} `json:"records"`
	}
	if err := json.Unmarshal(r.Raw, &body); err != nil {
		t.Fatal(err)
	}
	out := map[string]exactRow{}
	for _, rec := range body.Records {
		if rec.Table == "kinds" {
			out[rec.PK["id"]] = exactRow{row: rec.Row, version: rec.Version}
		}
	}
	return out
}
