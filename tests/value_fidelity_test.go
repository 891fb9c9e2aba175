package tests

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/wire"
)

// fidelityCase is one edge value of one column of app.kinds (pushTypesSetup):
// written directly as the SQL literal sql, it must be captured without blocking
// capture and delivered by pull, rebuild and push's server_row as want (the
// documented wire form, compared by wireCanon); pushed back as pulled it must
// be applied and store what the direct write stored (compared through the
// column's fidelityStored expression).
type fidelityCase struct {
	name, col, sql, want string
	// pushRefused: the pulled form cannot be pushed back; the push is a 400
	// invalid_request (a request limit), or "" when it must be applied.
	pushRefused string
	// storedBack: what a push back stores when it is not what the direct write
	// stored ("<NULL>": SQL NULL).
	storedBack string
}

// fidelityStored is how a stored value is compared after a push back: a float's
// negative zero comes back as zero (a JSON number is a numeric), a json value
// comes back in jsonb's form (one member per name, the last one written).
var fidelityStored = map[string]string{"f8": "x.f8 + 0", "f4": "x.f4 + 0", "js": "x.js::jsonb"}

// fidelityLargeText and fidelityLargeBytes are values stored out of line
// (TOAST): more than 1 MB of text and 800 kB of bytes.
var (
	fidelityLargeText  = strings.Repeat("é🌍\u2028x", 60000) + strings.Repeat("0123456789abcdef", 40000)
	fidelityLargeBytes = func() []byte {
		b := make([]byte, 800000)
		for i := range b {
			b[i] = byte(i*7919 + i/256)
		}
		return b
	}()
)

func fidelityCases() []fidelityCase {
	deep := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	cases := []fidelityCase{
		// timestamptz: RFC 3339 UTC within years 0001..9999; PostgreSQL's ISO text beyond.
		{name: "tstz_year1", col: "tstz", sql: `'0001-01-01 00:00:00+00'`, want: `"0001-01-01T00:00:00Z"`},
		{name: "tstz_year9999", col: "tstz", sql: `'9999-12-31 23:59:59.999999+00'`, want: `"9999-12-31T23:59:59.999999Z"`},
		{name: "tstz_offset_crosses_year", col: "tstz", sql: `'2026-01-01 00:30:00+05:30'`, want: `"2025-12-31T19:00:00Z"`},
		{name: "tstz_year10000", col: "tstz", sql: `'10000-01-01 00:00:00+00'`, want: `"10000-01-01 00:00:00+00"`},
		{name: "tstz_max", col: "tstz", sql: `'294276-12-31 23:59:59.999999+00'`, want: `"294276-12-31 23:59:59.999999+00"`},
		{name: "tstz_bc", col: "tstz", sql: `'0044-03-15 12:00:00.5+00 BC'`, want: `"0044-03-15 12:00:00.5+00 BC"`},
		{name: "tstz_min", col: "tstz", sql: `'4714-11-24 00:00:00+00 BC'`, want: `"4714-11-24 00:00:00+00 BC"`},
		{name: "tstz_infinity", col: "tstz", sql: `'infinity'`, want: `"infinity"`},
		{name: "tstz_minus_infinity", col: "tstz", sql: `'-infinity'`, want: `"-infinity"`},
		// timestamp without time zone: RFC 3339 with Z within 0001..9999, else no offset at all.
		{name: "ts_plain", col: "ts", sql: `'2026-01-01 00:00:00'`, want: `"2026-01-01T00:00:00Z"`},
		{name: "ts_year10000", col: "ts", sql: `'10000-01-01 00:00:00'`, want: `"10000-01-01 00:00:00"`},
		{name: "ts_bc", col: "ts", sql: `'0001-12-31 23:59:59.999999 BC'`, want: `"0001-12-31 23:59:59.999999 BC"`},
		{name: "ts_minus_infinity", col: "ts", sql: `'-infinity'`, want: `"-infinity"`},
		// date: PostgreSQL's ISO text.
		{name: "d_year10000", col: "d", sql: `'10000-01-01'`, want: `"10000-01-01"`},
		{name: "d_max", col: "d", sql: `'5874897-12-31'`, want: `"5874897-12-31"`},
		{name: "d_min", col: "d", sql: `'4714-11-24 BC'`, want: `"4714-11-24 BC"`},
		{name: "d_infinity", col: "d", sql: `'infinity'`, want: `"infinity"`},
		// time and time with time zone: PostgreSQL's text.
		{name: "tm_24", col: "tm", sql: `'24:00:00'`, want: `"24:00:00"`},
		{name: "tm_micro", col: "tm", sql: `'23:59:59.999999'`, want: `"23:59:59.999999"`},
		{name: "ttz_max_offset", col: "ttz", sql: `'24:00:00+15:59'`, want: `"24:00:00+15:59"`},
		{name: "ttz_min_offset", col: "ttz", sql: `'00:00:00-15:59'`, want: `"00:00:00-15:59"`},
		{name: "ttz_half_hour", col: "ttz", sql: `'12:34:56.789+05:30'`, want: `"12:34:56.789+05:30"`},
		// floats: numbers, non-finite values as strings, a negative zero as 0.
		{name: "f8_nan", col: "f8", sql: `'NaN'`, want: `"NaN"`},
		{name: "f8_minus_infinity", col: "f8", sql: `'-Infinity'`, want: `"-Infinity"`},
		{name: "f8_minus_zero", col: "f8", sql: `'-0'`, want: `0`},
		{name: "f8_min_subnormal", col: "f8", sql: `'4.9e-324'`, want: `5e-324`},
		{name: "f8_min_normal", col: "f8", sql: `'2.2250738585072014e-308'`, want: `2.2250738585072014e-308`},
		{name: "f8_max", col: "f8", sql: `'1.7976931348623157e308'`, want: `1.7976931348623157e308`},
		{name: "f8_shortest", col: "f8", sql: `'0.1'::float8 * 3`, want: `0.30000000000000004`},
		{name: "f4_minus_zero", col: "f4", sql: `'-0'`, want: `0`},
		{name: "f4_subnormal", col: "f4", sql: `'1e-45'`, want: `1e-45`},
		{name: "f4_infinity", col: "f4", sql: `'Infinity'`, want: `"Infinity"`},
		// numeric: exact, however many digits.
		{name: "num_nan", col: "num", sql: `'NaN'`, want: `"NaN"`},
		{name: "num_minus_infinity", col: "num", sql: `'-Infinity'`, want: `"-Infinity"`},
		{name: "num_1000_digits", col: "num", sql: `repeat('9', 1000)::numeric`, want: strings.Repeat("9", 1000)},
		{name: "num_smallest", col: "num", sql: `('0.' || repeat('0', 16382) || '1')::numeric`, want: "1e-16383"},
		{name: "num_minus_zero_scale", col: "num", sql: `'-0.000'`, want: `0`},
		{name: "num_long_fraction", col: "num", sql: `'-12345678901234567890.12345678901234567890'`, want: `-12345678901234567890.12345678901234567890`},
		// text: unusual characters, and a TOASTed value of more than 1 MB.
		{name: "s_control", col: "s", sql: `E'\x01\x1f\x7f' || chr(133)`, want: `"\u0001\u001f\u007f\u0085"`},
		{name: "s_separators", col: "s", sql: `U&'\2028\2029\FEFF\202E'`, want: `"\u2028\u2029\ufeff\u202e"`},
		{name: "s_astral", col: "s", sql: `U&'\+01D11E\+01F30D\+10FFFF'`, want: mustJSONString("𝄞🌍\U0010FFFF")},
		{name: "s_noncharacter", col: "s", sql: `U&'\FFFF\FFFE'`, want: `"\uffff\ufffe"`},
		{name: "s_html_and_escapes", col: "s", sql: `E'<&>"\\/\n\t'`, want: `"<&>\"\\/\n\t"`},
		{name: "s_empty", col: "s", sql: `''`, want: `""`},
		{name: "s_large", col: "s", sql: `repeat(U&'\00E9\+01F30D\2028x', 60000) || repeat('0123456789abcdef', 40000)`, want: mustJSONString(fidelityLargeText)},
		{name: "vc_trailing_spaces", col: "vc", sql: `'ab  '`, want: `"ab  "`},
		{name: "nm_63_bytes", col: "nm", sql: `repeat('é', 31) || 'x'`, want: mustJSONString(strings.Repeat("é", 31) + "x")},
		{name: "u_upper_case", col: "u", sql: `'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'`, want: `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{name: "u_braces", col: "u", sql: `'{a0eebc999c0b4ef8bb6d6bb9bd380a11}'`, want: `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{name: "e_sad", col: "e", sql: `'sad'`, want: `"sad"`},
		{name: "b_false", col: "b", sql: `false`, want: `false`},
		// bytes: base64, empty and large.
		{name: "bin_empty", col: "bin", sql: `'\x'`, want: `""`},
		{name: "bin_large", col: "bin", sql: `$b$` + fmt.Sprintf(`\x%x`, fidelityLargeBytes) + `$b$`, want: mustJSONString(base64.StdEncoding.EncodeToString(fidelityLargeBytes))},
		// json and jsonb: jsonb's form (one member per name, the last one).
		{name: "j_duplicate_keys", col: "j", sql: `'{"a": 1, "b": {"c": 1, "c": [2]}, "a": "last"}'`, want: `{"a": "last", "b": {"c": [2]}}`},
		{name: "js_duplicate_keys", col: "js", sql: `'{"a": 1, "b": {"c": 1, "c": [2]}, "a": "last"}'`, want: `{"a": "last", "b": {"c": [2]}}`},
		{name: "j_big_numbers", col: "j", sql: `'[1e400, -0, 1.0e-400, 123456789012345678901234567890.000, -1.5E+3]'`,
			want: `[1e400, 0, 1e-400, 123456789012345678901234567890, -1500]`},
		{name: "js_big_numbers", col: "js", sql: `'[1e400, -0.0, 1E-400]'`, want: `[1e400, 0, 1e-400]`},
		{name: "j_unicode", col: "j", sql: `'{"\u2028": "\ud834\udd1e", "k": "\u0001"}'`, want: `{"\u2028": "𝄞", "k": "\u0001"}`},
		{name: "j_scalar_string", col: "j", sql: `'"just a string"'`, want: `"just a string"`},
		// JSON's null is SQL NULL on the wire: pushed back, it stores NULL.
		{name: "j_null_literal", col: "j", sql: `'null'`, want: `null`, storedBack: "<NULL>"},
		{name: "js_null_literal", col: "js", sql: `'null'`, want: `null`, storedBack: "<NULL>"},
		// A push nests a column's value 4 deep in its body, which may nest 32 deep.
		{name: "j_depth_28", col: "j", sql: `'` + deep(28) + `'`, want: deep(28)},
		{name: "j_depth_29", col: "j", sql: `'` + deep(29) + `'`, want: deep(29), pushRefused: "nested deeper than 32"},
		{name: "j_depth_1000", col: "j", sql: `'` + deep(1000) + `'`, want: deep(1000), pushRefused: "nested deeper than 32"},
		{name: "js_depth_10001", col: "js", sql: `'` + deep(10001) + `'`, want: deep(10001), pushRefused: "nested deeper than 32"},
	}
	// NULL in every column that may hold it.
	for _, col := range []string{"s", "vc", "ch", "u", "nm", "e", "i2", "i4", "i8", "f8", "f4", "num", "b", "tstz", "ts", "d", "tm", "ttz", "j", "js", "bin"} {
		cases = append(cases, fidelityCase{name: col + "_null", col: col, sql: "NULL", want: "null"})
	}
	return cases
}

func mustJSONString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestValueFidelityAlongEveryPath: edge values of every portable type (years
// beyond 9999 and BC, infinities, NaN, negative zero, subnormals, numerics of
// many digits, extreme time zone offsets, control and separator characters,
// astral characters, TOASTed text and bytes of more than 1 MB, json with
// duplicate names, big numbers and deep nesting, uuid in upper case, NULL),
// written directly, are captured without blocking capture and delivered by
// pull and rebuild in their documented wire form, and as such in push's
// server_row of the row (a conflict); pushed back as pulled (an insert of a
// new row and an update of the row) they are applied, answered with the same
// server_row and stored as the direct write stored them. An
// update of another column (directly and by push) leaves every value as it
// was, the TOASTed ones (which the WAL leaves out) too.
func TestValueFidelityAlongEveryPath(t *testing.T) {
	t.Parallel()
	cases := fidelityCases()
	// The large text case is over the default value limit (1 MiB of JSON), and
	// the rows of every case are read in one page, over the default page bytes.
	e := newSyncEnv(t, pushTypesSetup, func(s *httpapi.Sync) { s.MaxValueBytes, s.MaxPageBytes = 4<<20, 64<<20 })
	e.connect(t, "u1", "c1")
	status, start := fidelityPost(t, e, "/sync/rebuild", []byte(`{"client_id": "c1", "scope": "user:u1", "cursor": null, "limit": 10}`))
	cursor := start["final_scope_cursor"]
	if status != http.StatusOK || cursor == nil {
		t.Fatalf("rebuild: %d %s", status, start["error"])
	}

	var inserts []string
	for _, c := range cases {
		inserts = append(inserts, fmt.Sprintf(`INSERT INTO app.kinds (id, owner_id, %s) VALUES ('d-%s', 'u1', %s)`, c.col, c.name, c.sql))
	}
	commitEach(t, e.d, inserts)
	waitMaterialized(t, e.d)
	// More than a page's worth of bytes is stored out of line (the WAL of an
	// update that leaves it unchanged leaves it out).
	if n := queryInt(t, e.d, `SELECT count(*) FROM app.kinds WHERE pg_column_size(s) > 8192 OR pg_column_size(bin) > 8192`); n != 2 {
		t.Fatalf("%d large values stored out of line, want 2", n)
	}
	stored := func(id string, c fidelityCase) string {
		expr, ok := fidelityStored[c.col]
		if !ok {
			expr = "x." + c.col
		}
		return queryText(t, e.d, fmt.Sprintf(`SELECT CASE WHEN x.%s IS NULL THEN '<NULL>' ELSE format('%%s', %s) END FROM app.kinds x WHERE id = $1`, c.col, expr), id)
	}
	direct := map[string]string{}
	for _, c := range cases {
		direct[c.name] = stored("d-"+c.name, c)
	}

	// Pull and rebuild deliver the documented form.
	pulled, cursor := fidelityPull(t, e, cursor)
	rebuilt := fidelityRebuild(t, e)
	for _, c := range cases {
		id := "d-" + c.name
		requireWire(t, c.name+": pull", pulled[id].row[c.col], c.want)
		requireWire(t, c.name+": rebuild", rebuilt[id].row[c.col], c.want)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Pushed back as pulled: as a new row and as an update of the row.
	for _, c := range cases {
		v := pulled["d-"+c.name].row[c.col]
		upd := mut("u-"+c.name, "kinds", "update", map[string]any{"id": "d-" + c.name}, map[string]any{c.col: fidelityValue})
		upd["base_version"] = pulled["d-"+c.name].version
		// An insert of the existing row is a conflict carrying the directly
		// written row as server_row.
		out, status, refusal := fidelityPush(t, e, v,
			mut("c-"+c.name, "kinds", "insert", map[string]any{"id": "d-" + c.name}, map[string]any{"owner_id": "u1"}),
			mut("i-"+c.name, "kinds", "insert", map[string]any{"id": "p-" + c.name}, map[string]any{"owner_id": "u1", c.col: fidelityValue}), upd)
		if c.pushRefused != "" {
			if status != http.StatusBadRequest || !strings.Contains(refusal, "invalid_request") || !strings.Contains(refusal, c.pushRefused) {
				t.Errorf("%s: push back answered %d %s, want 400 invalid_request %q", c.name, status, refusal, c.pushRefused)
			}
			continue
		}
		if status != http.StatusOK {
			t.Fatalf("%s: push back answered %d %s", c.name, status, refusal)
		}
		if o := out["c-"+c.name]; o.status != "conflict" {
			t.Errorf("%s: insert of the existing row answered %s, want a conflict", c.name, o.raw)
		} else {
			requireWire(t, c.name+": conflict's server_row", o.serverRow[c.col], c.want)
		}
		for _, m := range []string{"i-", "u-"} {
			o, ok := out[m+c.name]
			if !ok || o.status != "applied" {
				t.Errorf("%s: %s%s pushed back as pulled (%.200s): %s, want applied", c.name, m, c.name, v, o.raw)
				continue
			}
			requireWire(t, c.name+": "+m+" server_row", o.serverRow[c.col], c.want)
		}
		want := direct[c.name]
		if c.storedBack != "" {
			want = c.storedBack
		}
		for _, id := range []string{"d-" + c.name, "p-" + c.name} {
			if got := stored(id, c); got != want {
				t.Errorf("%s: %s stores %.200q after the push back, want %.200q (the direct write stored %.200q)", c.name, id, got, want, direct[c.name])
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	waitMaterialized(t, e.d)

	// Another column changes, directly (pushed rows) and by push (directly
	// written rows): unchanged values, out of line ones too, stay as they were.
	e.d.Exec(t, `UPDATE app.kinds SET i4 = 1 WHERE id LIKE 'p-%' AND id <> 'p-i4_null'`)
	var muts []map[string]any
	for _, c := range cases {
		if c.col != "i4" {
			muts = append(muts, mut("o-"+c.name, "kinds", "update", map[string]any{"id": "d-" + c.name}, map[string]any{"i4": 2}))
		}
	}
	out, status, refusal := fidelityPush(t, e, nil, muts...)
	if status != http.StatusOK {
		t.Fatalf("update of another column: %d %s", status, refusal)
	}
	for _, c := range cases {
		if o := out["o-"+c.name]; c.col != "i4" && (o.status != "applied" || !wireEqual(o.serverRow[c.col], c.want)) {
			t.Errorf("%s: update of another column answered %s", c.name, o.raw)
		}
	}
	waitMaterialized(t, e.d)
	pulled, _ = fidelityPull(t, e, cursor)
	rebuilt = fidelityRebuild(t, e)
	for _, c := range cases {
		for _, id := range []string{"d-" + c.name, "p-" + c.name} {
			if c.pushRefused != "" && id[0] == 'p' || c.col == "i4" {
				continue
			}
			if got := string(pulled[id].row["i4"]); got != "1" && got != "2" {
				t.Errorf("%s: pull after the update of another column delivers i4 %s", id, got)
			}
			requireWire(t, id+" after an update of another column: pull", pulled[id].row[c.col], c.want)
			requireWire(t, id+" after an update of another column: rebuild", rebuilt[id].row[c.col], c.want)
		}
	}
}

// fidelityPost posts body to path as u1 and returns the status and the
// answer's members, read without a nesting limit (package wire: a row may hold
// json nested deeper than encoding/json reads) and with numbers as written.
func fidelityPost(t *testing.T, e *syncEnv, path string, body []byte) (int, map[string]json.RawMessage) {
	t.Helper()
	status, _, raw := fuzzPost(t, e.url+path, token(t, "u1"), body)
	return status, fidelityObject(t, raw)
}

// fidelityObject is the JSON object raw by member name.
func fidelityObject(t *testing.T, raw []byte) map[string]json.RawMessage {
	t.Helper()
	members, err := wire.Members(raw)
	if err != nil {
		t.Fatalf("not a JSON object (%v): %.300s", err, raw)
	}
	out := map[string]json.RawMessage{}
	for _, m := range members {
		out[m.Name] = m.Value
	}
	return out
}

// fidelityList is the objects of the JSON array raw.
func fidelityList(t *testing.T, raw []byte) []map[string]json.RawMessage {
	t.Helper()
	items, err := wire.Elements(raw)
	if err != nil {
		t.Fatalf("not a JSON array (%v): %.300s", err, raw)
	}
	var out []map[string]json.RawMessage
	for _, it := range items {
		out = append(out, fidelityObject(t, it))
	}
	return out
}

// fidelityRows returns the kinds rows (upserts) of the records or changes list
// of a pull or rebuild answer by id.
func fidelityRows(t *testing.T, body map[string]json.RawMessage, list string) map[string]exactRow {
	t.Helper()
	if string(body["has_more"]) != "false" {
		t.Fatalf("the answer does not fit one page: has_more %s", body["has_more"])
	}
	out := map[string]exactRow{}
	for _, rec := range fidelityList(t, body[list]) {
		if string(rec["table"]) != `"kinds"` || rec["row"] == nil {
			continue
		}
		var id, version string
		if err := errors.Join(json.Unmarshal(fidelityObject(t, rec["pk"])["id"], &id), json.Unmarshal(rec["server_version"], &version)); err != nil {
			t.Fatal(err)
		}
		out[id] = exactRow{row: fidelityObject(t, rec["row"]), version: version}
	}
	return out
}

// fidelityPull pulls scope user:u1 of client c1 after cursor in one page and
// returns the delivered kinds rows by id and the new cursor.
func fidelityPull(t *testing.T, e *syncEnv, cursor json.RawMessage) (map[string]exactRow, json.RawMessage) {
	t.Helper()
	status, body := fidelityPost(t, e, "/sync/pull", []byte(mustMarshal(t, map[string]any{"client_id": "c1", "limit": 1000,
		"scopes": map[string]any{"user:u1": map[string]any{"cursor": cursor}}})))
	if status != http.StatusOK {
		t.Fatalf("pull: %d %s", status, body["error"])
	}
	return fidelityRows(t, body, "changes"), fidelityObject(t, body["scope_cursors"])["user:u1"]
}

// fidelityRebuild rebuilds scope user:u1 of client c1 in one page and returns
// its kinds rows by id.
func fidelityRebuild(t *testing.T, e *syncEnv) map[string]exactRow {
	t.Helper()
	status, body := fidelityPost(t, e, "/sync/rebuild", []byte(`{"client_id": "c1", "scope": "user:u1", "cursor": null, "limit": 1000}`))
	if status != http.StatusOK {
		t.Fatalf("rebuild: %d %s", status, body["error"])
	}
	return fidelityRows(t, body, "records")
}

// fidelityOutcome is one push outcome with server_row as the wire sent it.
type fidelityOutcome struct {
	status    string
	serverRow map[string]json.RawMessage
	raw       string
}

// fidelityValue stands for a value in mutations that fidelityPush sends as is
// (json.Marshal would refuse one nested more than 10,000 deep).
const fidelityValue = "<fidelity value>"

// fidelityPush pushes mutations for c1, with value in place of fidelityValue,
// and returns the outcomes by mutation_id; a refused push returns its status
// and error instead.
func fidelityPush(t *testing.T, e *syncEnv, value json.RawMessage, muts ...map[string]any) (map[string]fidelityOutcome, int, string) {
	t.Helper()
	body := bytes.ReplaceAll([]byte(mustMarshal(t, map[string]any{"client_id": "c1", "mutations": muts})), []byte(mustJSONString(fidelityValue)), value)
	status, answer := fidelityPost(t, e, "/sync/push", body)
	if status != http.StatusOK {
		return nil, status, string(answer["error"])
	}
	out := map[string]fidelityOutcome{}
	for _, list := range []string{"accepted", "rejected"} {
		items, err := wire.Elements(answer[list])
		if err != nil {
			t.Fatalf("push answer's %s: %v", list, err)
		}
		for _, item := range items {
			o := fidelityObject(t, item)
			var id, st string
			if err := errors.Join(json.Unmarshal(o["mutation_id"], &id), json.Unmarshal(o["status"], &st)); err != nil {
				t.Fatal(err)
			}
			f := fidelityOutcome{status: st, raw: fmt.Sprintf("%.300s", item)}
			if row := o["server_row"]; row != nil && string(row) != "null" {
				f.serverRow = fidelityObject(t, row)
			}
			out[id] = f
		}
	}
	return out, status, ""
}

// requireWire fails unless got (a value as the wire sent it) is want.
func requireWire(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	if !wireEqual(got, want) {
		t.Errorf("%s: delivered %.300s, want %.300s", what, got, want)
	}
}

// wireEqual reports whether two JSON texts hold the same value: objects
// compared by member (jsonb orders them its own way; an object naming a member
// twice equals nothing), numbers by exact value with a negative zero told
// apart from zero, strings exactly.
func wireEqual(got json.RawMessage, want string) bool {
	if got == nil {
		return false
	}
	a, errA := wireCanon(got)
	b, errB := wireCanon([]byte(want))
	return errA == nil && errB == nil && a == b
}

// wireCanon is the canonical form of a JSON text that wireEqual compares. It
// walks the tokens (no nesting limit) and writes numbers as exact fractions.
func wireCanon(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var canon func() (string, error)
	canon = func() (string, error) {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch v := tok.(type) {
		case json.Delim:
			members := map[string]string{}
			var items []string
			for dec.More() {
				var name any
				if v == '{' {
					if name, err = dec.Token(); err != nil {
						return "", err
					}
				}
				item, err := canon()
				if err != nil {
					return "", err
				}
				if v == '{' {
					if _, dup := members[name.(string)]; dup {
						return "", fmt.Errorf("an object names %q twice", name)
					}
					members[name.(string)] = item
				} else {
					items = append(items, item)
				}
			}
			if _, err := dec.Token(); err != nil {
				return "", err
			}
			if v == '{' {
				m, err := json.Marshal(members)
				return "{" + string(m), err
			}
			return "[" + strings.Join(items, ",") + "]", nil
		case json.Number:
			r, ok := new(big.Rat).SetString(string(v))
			if !ok {
				return "", fmt.Errorf("number %s", v)
			}
			if r.Sign() == 0 && strings.HasPrefix(string(v), "-") {
				return "-0", nil
			}
			return r.RatString(), nil
		default:
			m, err := json.Marshal(v)
			return string(m), err
		}
	}
	return canon()
}

// TestPushOutOfRangeValuesAreRejected: a pushed value of the right JSON type
// that its column cannot hold (beyond a float's range, a date's or
// timestamp's years, a time of day or zone offset, an unknown enum label or
// uuid, bytes that are not base64, padding inside it too: PostgreSQL's decode
// took "AA=A" as one zero byte) is rejected validation_failed naming the
// column, and changes nothing; the other mutations of the push apply.
func TestPushOutOfRangeValuesAreRejected(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, pushTypesSetup+`; INSERT INTO app.kinds (id, owner_id, s) VALUES ('t1', 'u1', 'keep')`)
	e.connect(t, "u1", "c1")
	const t1 = `SELECT (to_jsonb(k) - 'i4')::text FROM app.kinds k WHERE id = 't1'`
	before := queryText(t, e.d, t1)
	cases := []struct {
		col string
		val any
	}{
		{"f8", json.Number("1e309")}, {"f8", json.Number("-1e400")}, {"f8", json.Number("1e-400")}, {"f4", json.Number("3.5e38")}, {"f4", json.Number("1e-46")},
		{"d", "5874898-01-01"}, {"d", "4714-11-23 BC"}, {"d", "0000-01-01"}, {"d", "2026-02-30"},
		{"tstz", "294277-01-01T00:00:00Z"}, {"tstz", "4714-11-23 23:59:59+00 BC"}, {"ts", "294277-01-01 00:00:00"},
		{"tm", "24:00:00.000001"}, {"tm", "25:00"}, {"ttz", "00:00:00+16:00"},
		{"e", "nope"}, {"e", "Sad"}, {"u", "not-a-uuid"}, {"u", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"},
		{"bin", "A"}, {"bin", "AAA"}, {"bin", "AA=A"}, {"bin", "AA=\nA"}, {"bin", "AAAA=AAA"}, {"vc", "12345678901"}, {"ch", "abcde"},
		{"i2", json.Number("32768")}, {"i8", json.Number("9223372036854775808")},
	}
	var muts []map[string]any
	for i, c := range cases {
		muts = append(muts, mut(fmt.Sprintf("bad%d", i), "kinds", "update", map[string]any{"id": "t1"}, map[string]any{c.col: c.val}),
			mut(fmt.Sprintf("new%d", i), "kinds", "insert", map[string]any{"id": fmt.Sprintf("n%d", i)}, map[string]any{"owner_id": "u1", c.col: c.val}))
	}
	muts = append(muts, mut("good", "kinds", "update", map[string]any{"id": "t1"}, map[string]any{"i4": 1}))
	resp := e.push(t, "u1", "c1", muts...)
	for i, c := range cases {
		for _, id := range []string{fmt.Sprintf("bad%d", i), fmt.Sprintf("new%d", i)} {
			list, o := outcome(t, resp, id)
			msg, _ := o["message"].(string)
			if list != "rejected" || o["code"] != "validation_failed" || !strings.Contains(msg, fmt.Sprintf("%q", c.col)) {
				t.Errorf("%s (%s = %v): %s %v, want validation_failed naming the column", id, c.col, c.val, list, o)
			}
		}
	}
	if list, o := outcome(t, resp, "good"); list != "accepted" || o["status"] != "applied" {
		t.Fatalf("good: %s %v", list, o)
	}
	if got := queryText(t, e.d, t1); got != before || queryInt(t, e.d, `SELECT i4 FROM app.kinds WHERE id = 't1'`) != 1 {
		t.Errorf("t1 after the push: %s, want %s with i4 1", got, before)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM app.kinds WHERE id <> 't1'`); n != 0 {
		t.Errorf("%d rejected inserts were written", n)
	}
	waitMaterialized(t, e.d)
}

// TestDependencyValuesOfAnyType: a capture dependency captures columns of any
// type; arrays (NULL elements, several dimensions, other lower bounds),
// intervals (negative, mixed signs, the largest), ranges with infinite bounds
// and the like materialize without blocking capture, each projected as its
// PostgreSQL text under the worker's settings (an interval in ISO 8601, as
// IntervalStyle iso_8601 writes it).
func TestDependencyValuesOfAnyType(t *testing.T) {
	t.Parallel()
	d := shapeStart(t, `CREATE SCHEMA app;
		CREATE TABLE app.dep (id int PRIMARY KEY, a int[], t text[], iv interval, r tstzrange, p point);
		SELECT synchro.register_dependency('app.dep')`)
	values := []string{
		`(1, '{1,NULL,3}', '{{"a",NULL},{"NULL","\""}}', '-1 year 2 mons -3 days +04:05:06.789', '[-infinity,infinity)', '(1e300,-0)')`,
		`(2, '[2:3]={7,8}', '[0:0][1:2]={{"é𝄞",""}}', '178000000 years', 'empty', '(NaN,Infinity)')`,
		`(3, '{}', '{}', '-178000000 years -2147483647 days -2562047788:00:54.775807', '(,)', NULL)`,
		`(4, NULL, NULL, NULL, NULL, NULL)`,
	}
	c := commitTxn(t, d, `INSERT INTO app.dep VALUES `+strings.Join(values, ", "))
	waitMaterialized(t, d)
	ledgerOf(t, d, c)
	if got := queryText(t, d, `SELECT string_agg(image ->> 'iv', ' ' ORDER BY key) FROM synchro.projection WHERE key IN ('1', '2')`); got != "P-10M-3DT4H5M6.789S P178000000Y" {
		t.Errorf("intervals projected as %s", got)
	}
	for col, projected := range map[string]string{"a": "p.image ->> 'a'", "t": "p.image ->> 't'", "iv": "((p.image ->> 'iv')::interval)::text",
		"r": "p.image ->> 'r'", "p": "p.image ->> 'p'"} {
		if n := queryInt(t, d, fmt.Sprintf(`SELECT count(*) FROM app.dep x JOIN synchro.projection p ON p.key = x.id::text
			WHERE %s IS NOT DISTINCT FROM (CASE WHEN x.%s IS NOT NULL THEN format('%%s', x.%[2]s) END)`, projected, col)); n != int64(len(values)) {
			t.Errorf("column %s: %d of %d projections hold its value", col, n, len(values))
		}
	}
}
