package capture

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Members shared by the test messages.
const (
	tRel     = `"relation":{"schema":"bench","name":"items","oid":16402}`
	tVersion = `"version":"60374e1dcdfb8140a6fe91cf09b8366f"`
	tFenceID = `"fence_id":"019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f70"`
)

// fence builds a message in the trigger's layout: the shared members with the
// given op, then members (the keys), then table_id for a synced registration.
func fence(kind, op string, members ...string) string {
	m := []string{`"registration_kind":"` + kind + `"`, `"relation_id":3`, tRel, `"op":"` + op + `"`, tVersion, tFenceID, `"ordinal":1`}
	m = append(m, members...)
	if kind == KindSynced {
		m = append(m, `"table_id":1`)
	}
	return obj(m...)
}

func obj(members ...string) string { return "{" + strings.Join(members, ",") + "}" }

// sub replaces the only occurrence of old in s; it panics when there is none,
// so that a typo cannot turn a case into a duplicate of the base message.
func sub(s, old, new string) string {
	if strings.Count(s, old) != 1 {
		panic("sub: " + old + " not found exactly once in " + s)
	}
	return strings.Replace(s, old, new, 1)
}

// want is the Fence that the shared members and the given kind, op and keys
// parse to; edit changes it further.
func want(kind, op, oldKey, newKey string, edit ...func(*Fence)) *Fence {
	f := &Fence{
		FenceTarget: &FenceTarget{RegistrationKind: kind, RelationID: 3, Relation: Relation{Schema: "bench", Name: "items", OID: 16402}},
		Op:          op,
		Version:     "60374e1dcdfb8140a6fe91cf09b8366f",
		FenceID:     "019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f70",
		Ordinal:     1,
	}
	if oldKey != "" {
		f.OldKey = json.RawMessage(oldKey)
	}
	if newKey != "" {
		f.NewKey = json.RawMessage(newKey)
	}
	if kind == KindSynced {
		one := int32(1)
		f.TableID = &one
	}
	for _, e := range edit {
		e(f)
	}
	return f
}

const benchFence = `{"registration_kind":"synced","relation_id":3,"relation":{"schema":"bench","name":"items","oid":16402},"op":"insert","version":"60374e1dcdfb8140a6fe91cf09b8366f","fence_id":"019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f70","ordinal":1,"new_key":52431,"table_id":1}`

type fenceCase struct {
	name string
	in   string
	want *Fence // nil: rejected
	key  string // Key() of an accepted message
	err  string // part of the error of a rejected message
}

// fenceCases is today's behaviour of ParseFence.
func fenceCases() []fenceCase {
	insert := fence(KindSynced, "insert", `"new_key":52431`)
	// json_build_object's own layout, before json_strip_nulls compacts it.
	pgLayout := `{"registration_kind" : "synced", "relation_id" : 3, "relation" : {"schema" : "bench", "name" : "items", "oid" : 16402}, "op" : "insert", "version" : "60374e1dcdfb8140a6fe91cf09b8366f", "fence_id" : "019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f70", "ordinal" : 1, "new_key" : 52431, "table_id" : 1}`
	withKeys := func(old, new string) string {
		return sub(sub(insert, `"op":"insert"`, `"op":"update"`), `"new_key":52431`, `"old_key":`+old+`,"new_key":`+new)
	}

	return []fenceCase{
		// Accepted.
		{name: "bench message", in: benchFence, want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "synced insert int", in: insert, want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "synced insert string", in: fence(KindSynced, "insert", `"new_key":"a-1"`), want: want(KindSynced, "insert", "", `"a-1"`), key: "a-1"},
		{name: "synced update int", in: fence(KindSynced, "update", `"old_key":7`, `"new_key":7`), want: want(KindSynced, "update", "7", "7"), key: "7"},
		{name: "synced update string", in: fence(KindSynced, "update", `"old_key":"k"`, `"new_key":"k"`), want: want(KindSynced, "update", `"k"`, `"k"`), key: "k"},
		{name: "synced delete int", in: fence(KindSynced, "delete", `"old_key":-12`), want: want(KindSynced, "delete", "-12", ""), key: "-12"},
		{name: "synced delete string", in: fence(KindSynced, "delete", `"old_key":"k"`), want: want(KindSynced, "delete", `"k"`, ""), key: "k"},
		{name: "dependency insert int", in: fence(KindDependency, "insert", `"new_key":7`), want: want(KindDependency, "insert", "", "7"), key: "7"},
		{name: "dependency insert string", in: fence(KindDependency, "insert", `"new_key":"x y"`), want: want(KindDependency, "insert", "", `"x y"`), key: "x y"},
		{name: "dependency update", in: fence(KindDependency, "update", `"old_key":"k"`, `"new_key":"k"`), want: want(KindDependency, "update", `"k"`, `"k"`), key: "k"},
		{name: "dependency delete", in: fence(KindDependency, "delete", `"old_key":7`), want: want(KindDependency, "delete", "7", ""), key: "7"},
		{name: "dependency table_id null", in: fence(KindDependency, "insert", `"new_key":7`, `"table_id":null`), want: want(KindDependency, "insert", "", "7"), key: "7"},
		{name: "postgres layout", in: pgLayout, want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "surrounding whitespace", in: " \n\t" + insert + "\r\n ", want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "member order", in: obj(`"table_id":1`, `"new_key":52431`, `"ordinal":1`, tFenceID, tVersion, `"op":"insert"`, tRel, `"relation_id":3`, `"registration_kind":"synced"`), want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "string key escapes", in: fence(KindSynced, "insert", `"new_key":"a\"\\\u00e9\n"`), want: want(KindSynced, "insert", "", `"a\"\\\u00e9\n"`), key: "a\"\\\u00e9\n"},
		{name: "string key utf-8", in: fence(KindSynced, "insert", `"new_key":"ключ"`), want: want(KindSynced, "insert", "", `"ключ"`), key: "ключ"},
		{name: "string key that looks like a number", in: fence(KindSynced, "insert", `"new_key":"1.5"`), want: want(KindSynced, "insert", "", `"1.5"`), key: "1.5"},
		{name: "largest int64 key", in: fence(KindSynced, "insert", `"new_key":9223372036854775807`), want: want(KindSynced, "insert", "", "9223372036854775807"), key: "9223372036854775807"},
		{name: "smallest int64 key", in: fence(KindSynced, "delete", `"old_key":-9223372036854775808`), want: want(KindSynced, "delete", "-9223372036854775808", ""), key: "-9223372036854775808"},
		{name: "zero key", in: fence(KindSynced, "insert", `"new_key":0`), want: want(KindSynced, "insert", "", "0"), key: "0"},
		// PostgreSQL takes '' as a text key like any other.
		{name: "empty string key", in: fence(KindSynced, "insert", `"new_key":""`), want: want(KindSynced, "insert", "", `""`), key: ""},
		{name: "update empty string keys", in: withKeys(`""`, `""`), want: want(KindSynced, "update", `""`, `""`), key: ""},
		// Today's behaviour, kept as is: -0 passes as an integer with text "-0".
		{name: "negative zero key", in: fence(KindSynced, "insert", `"new_key":-0`), want: want(KindSynced, "insert", "", "-0"), key: "-0"},
		// Update keys are compared by key text, not by their JSON.
		{name: "update int and string key", in: withKeys(`7`, `"7"`), want: want(KindSynced, "update", "7", `"7"`), key: "7"},
		{name: "update escaped string key", in: withKeys(`"\u0041"`, `"A"`), want: want(KindSynced, "update", `"\u0041"`, `"A"`), key: "A"},
		{name: "large ids", in: sub(sub(sub(insert, `"relation_id":3`, `"relation_id":9223372036854775807`), `"oid":16402`, `"oid":4294967295`), `"table_id":1`, `"table_id":2147483647`),
			want: want(KindSynced, "insert", "", "52431", func(f *Fence) {
				f.RelationID, f.Relation.OID = 9223372036854775807, 4294967295
				*f.TableID = 2147483647
			}), key: "52431"},
		{name: "escapes in strings", in: sub(sub(insert, `"schema":"bench"`, `"schema":"b\u00e9nch"`), `"name":"items"`, `"name":"it\"ems"`),
			want: want(KindSynced, "insert", "", "52431", func(f *Fence) { f.Relation.Schema, f.Relation.Name = "b\u00e9nch", `it"ems` }), key: "52431"},
		{name: "escaped fence_id", in: sub(insert, `"019ad6d2-`, `"\u0030\u00319ad6d2-`), want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		// encoding/json matches member names case-insensitively and unescaped.
		{name: "member name case", in: sub(sub(insert, `"registration_kind"`, `"REGISTRATION_KIND"`), `"schema"`, `"Schema"`), want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "member name folding", in: sub(insert, `"schema"`, `"ſchema"`), want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "escaped member name", in: sub(insert, `"op"`, `"\u006fp"`), want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		// Duplicate members: the last one wins, and objects merge.
		{name: "duplicate op", in: fence(KindSynced, "delete", `"op":"insert"`, `"new_key":52431`), want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "duplicate key", in: fence(KindSynced, "insert", `"new_key":1`, `"new_key":52431`), want: want(KindSynced, "insert", "", "52431"), key: "52431"},
		{name: "duplicate relation merges", in: fence(KindSynced, "insert", `"new_key":52431`, `"relation":{"name":"other"}`),
			want: want(KindSynced, "insert", "", "52431", func(f *Fence) { f.Relation.Name = "other" }), key: "52431"},
		{name: "duplicate table_id", in: sub(insert, `"table_id":1`, `"table_id":1,"table_id":2`), want: want(KindSynced, "insert", "", "52431", func(f *Fence) { *f.TableID = 2 }), key: "52431"},
		// Nothing but whitespace may follow the object.
		{name: "trailing close brace", in: insert + "}", err: "trailing data"},
		{name: "trailing close bracket and more", in: insert + " ]x{", err: "trailing data"},

		// Rejected: not one JSON object.
		{name: "empty", in: "", err: "EOF"},
		{name: "whitespace", in: " \n", err: "EOF"},
		{name: "null", in: "null", err: "missing relation_id"},
		{name: "empty object", in: "{}", err: "missing relation_id"},
		{name: "array", in: "[" + insert + "]", err: "cannot unmarshal array"},
		{name: "string", in: `"x"`, err: "cannot unmarshal string"},
		{name: "number", in: `1`, err: "cannot unmarshal number"},
		{name: "truncated", in: insert[:len(insert)-1], err: "unexpected EOF"},
		{name: "malformed", in: sub(insert, `"op":"insert"`, `"op":insert`), err: "invalid character"},
		{name: "trailing comma", in: sub(insert, `"table_id":1}`, `"table_id":1,}`), err: "invalid character"},
		{name: "single quotes", in: sub(insert, `"op":"insert"`, `'op':'insert'`), err: "invalid character"},
		{name: "trailing garbage", in: insert + "x", err: "trailing data"},
		{name: "trailing value", in: insert + " 1", err: "trailing data"},
		{name: "second object", in: insert + insert, err: "trailing data"},
		{name: "byte order mark", in: "\ufeff" + insert, err: "invalid character"},

		// Rejected: unknown members and wrong types.
		{name: "unknown member", in: fence(KindSynced, "insert", `"new_key":52431`, `"extra":1`), err: `unknown field "extra"`},
		{name: "unknown null member", in: fence(KindSynced, "insert", `"new_key":52431`, `"extra":null`), err: `unknown field "extra"`},
		{name: "unknown relation member", in: sub(insert, `"oid":16402`, `"oid":16402,"kind":"r"`), err: `unknown field "kind"`},
		{name: "relation member at top level", in: fence(KindSynced, "insert", `"new_key":52431`, `"oid":16402`), err: `unknown field "oid"`},
		{name: "json tag name of Go field", in: fence(KindSynced, "insert", `"new_key":52431`, `"RelationID":3`), err: `unknown field "RelationID"`},
		{name: "relation_id string", in: sub(insert, `"relation_id":3`, `"relation_id":"3"`), err: "cannot unmarshal string"},
		{name: "relation_id float", in: sub(insert, `"relation_id":3`, `"relation_id":3.0`), err: "cannot unmarshal number 3.0"},
		{name: "relation_id overflow", in: sub(insert, `"relation_id":3`, `"relation_id":9223372036854775808`), err: "cannot unmarshal number"},
		{name: "relation string", in: sub(insert, tRel, `"relation":"bench.items"`), err: "cannot unmarshal string"},
		{name: "relation array", in: sub(insert, tRel, `"relation":[]`), err: "cannot unmarshal array"},
		{name: "oid negative", in: sub(insert, `"oid":16402`, `"oid":-1`), err: "cannot unmarshal number -1"},
		{name: "oid overflow", in: sub(insert, `"oid":16402`, `"oid":4294967296`), err: "cannot unmarshal number 4294967296"},
		{name: "oid string", in: sub(insert, `"oid":16402`, `"oid":"16402"`), err: "cannot unmarshal string"},
		{name: "schema number", in: sub(insert, `"schema":"bench"`, `"schema":1`), err: "cannot unmarshal number"},
		{name: "op number", in: sub(insert, `"op":"insert"`, `"op":1`), err: "cannot unmarshal number"},
		{name: "version bool", in: sub(insert, tVersion, `"version":true`), err: "cannot unmarshal bool"},
		{name: "fence_id number", in: sub(insert, tFenceID, `"fence_id":1`), err: "cannot unmarshal number"},
		{name: "ordinal float", in: sub(insert, `"ordinal":1`, `"ordinal":1.5`), err: "cannot unmarshal number 1.5"},
		{name: "ordinal string", in: sub(insert, `"ordinal":1`, `"ordinal":"1"`), err: "cannot unmarshal string"},
		{name: "table_id overflow", in: sub(insert, `"table_id":1`, `"table_id":2147483648`), err: "cannot unmarshal number 2147483648"},
		{name: "table_id string", in: sub(insert, `"table_id":1`, `"table_id":"1"`), err: "cannot unmarshal string"},
		{name: "registration_kind null", in: sub(insert, `"registration_kind":"synced"`, `"registration_kind":null`), err: "unknown registration_kind"},

		// Rejected: required members (in ParseFence's order of checks).
		{name: "missing relation_id", in: sub(insert, `"relation_id":3,`, ``), err: "missing relation_id"},
		{name: "zero relation_id", in: sub(insert, `"relation_id":3`, `"relation_id":0`), err: "missing relation_id"},
		{name: "negative relation_id", in: sub(insert, `"relation_id":3`, `"relation_id":-3`), err: "missing relation_id"},
		{name: "missing relation", in: sub(insert, tRel+",", ``), err: "incomplete relation identity"},
		{name: "null relation", in: sub(insert, tRel, `"relation":null`), err: "incomplete relation identity"},
		{name: "empty schema", in: sub(insert, `"schema":"bench"`, `"schema":""`), err: "incomplete relation identity"},
		{name: "missing name", in: sub(insert, `"name":"items",`, ``), err: "incomplete relation identity"},
		{name: "zero oid", in: sub(insert, `"oid":16402`, `"oid":0`), err: "incomplete relation identity"},
		{name: "missing version", in: sub(insert, tVersion+",", ``), err: "missing version"},
		{name: "empty version", in: sub(insert, tVersion, `"version":""`), err: "missing version"},
		{name: "missing fence_id", in: sub(insert, tFenceID+",", ``), err: "fence_id is not a canonical UUID"},
		{name: "uppercase fence_id", in: sub(insert, tFenceID, `"fence_id":"019AD6D2-1C4E-7A3B-9F1E-2B3C4D5E6F70"`), err: "canonical UUID"},
		{name: "one uppercase digit", in: sub(insert, tFenceID, `"fence_id":"019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f7A"`), err: "canonical UUID"},
		{name: "fence_id without hyphens", in: sub(insert, tFenceID, `"fence_id":"019ad6d21c4e7a3b9f1e2b3c4d5e6f70"`), err: "canonical UUID"},
		{name: "fence_id in braces", in: sub(insert, tFenceID, `"fence_id":"{019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f70}"`), err: "canonical UUID"},
		{name: "fence_id urn", in: sub(insert, tFenceID, `"fence_id":"urn:uuid:019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f70"`), err: "canonical UUID"},
		{name: "fence_id misplaced hyphen", in: sub(insert, tFenceID, `"fence_id":"019ad6d21-c4e-7a3b-9f1e-2b3c4d5e6f70"`), err: "canonical UUID"},
		{name: "fence_id non-hex", in: sub(insert, tFenceID, `"fence_id":"019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f7g"`), err: "canonical UUID"},
		{name: "fence_id short", in: sub(insert, tFenceID, `"fence_id":"019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f7"`), err: "canonical UUID"},
		{name: "fence_id long", in: sub(insert, tFenceID, `"fence_id":"019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f700"`), err: "canonical UUID"},
		{name: "fence_id trailing newline", in: sub(insert, tFenceID, `"fence_id":"019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f70\n"`), err: "canonical UUID"},
		{name: "fence_id leading space", in: sub(insert, tFenceID, `"fence_id":" 019ad6d2-1c4e-7a3b-9f1e-2b3c4d5e6f70"`), err: "canonical UUID"},
		{name: "missing ordinal", in: sub(insert, `"ordinal":1,`, ``), err: "ordinal must be positive"},
		{name: "zero ordinal", in: sub(insert, `"ordinal":1`, `"ordinal":0`), err: "ordinal must be positive"},
		{name: "negative ordinal", in: sub(insert, `"ordinal":1`, `"ordinal":-1`), err: "ordinal must be positive"},
		{name: "synced without table_id", in: sub(insert, `,"table_id":1`, ``), err: "synced registration without table_id"},
		{name: "synced null table_id", in: sub(insert, `"table_id":1`, `"table_id":null`), err: "synced registration without table_id"},
		{name: "synced zero table_id", in: sub(insert, `"table_id":1`, `"table_id":0`), err: "synced registration without table_id"},
		{name: "synced negative table_id", in: sub(insert, `"table_id":1`, `"table_id":-1`), err: "synced registration without table_id"},
		{name: "dependency with table_id", in: fence(KindDependency, "insert", `"new_key":7`, `"table_id":1`), err: "capture_dependency registration with table_id"},
		{name: "dependency with zero table_id", in: fence(KindDependency, "insert", `"new_key":7`, `"table_id":0`), err: "capture_dependency registration with table_id"},
		{name: "missing registration_kind", in: sub(insert, `"registration_kind":"synced",`, ``), err: "unknown registration_kind"},
		{name: "unknown registration_kind", in: sub(insert, `"registration_kind":"synced"`, `"registration_kind":"Synced"`), err: "unknown registration_kind"},
		{name: "missing op", in: sub(insert, `"op":"insert",`, ``), err: "unknown op"},
		{name: "uppercase op", in: sub(insert, `"op":"insert"`, `"op":"INSERT"`), err: "unknown op"},
		{name: "truncate op", in: sub(insert, `"op":"insert"`, `"op":"truncate"`), err: "unknown op"},

		// Rejected: keys.
		{name: "insert with old_key", in: fence(KindSynced, "insert", `"old_key":7`, `"new_key":7`), err: "insert needs new_key only"},
		{name: "insert without new_key", in: fence(KindSynced, "insert"), err: "insert needs new_key only"},
		{name: "insert with null old_key", in: fence(KindSynced, "insert", `"old_key":null`, `"new_key":7`), err: "insert needs new_key only"},
		{name: "update without old_key", in: fence(KindSynced, "update", `"new_key":7`), err: "update needs equal old_key and new_key"},
		{name: "update without new_key", in: fence(KindSynced, "update", `"old_key":7`), err: "update needs equal old_key and new_key"},
		{name: "update key change", in: withKeys(`7`, `8`), err: "update needs equal old_key and new_key"},
		{name: "update string key change", in: withKeys(`"a"`, `"A"`), err: "update needs equal old_key and new_key"},
		{name: "update float keys", in: withKeys(`7`, `7.0`), err: "update needs equal old_key and new_key"},
		{name: "update equal float keys", in: withKeys(`1.5`, `1.5`), err: "key is not a string or integer"},
		{name: "update null keys", in: withKeys(`null`, `null`), err: "key is not a string or integer"},
		{name: "update equal bool keys", in: withKeys(`true`, `true`), err: "key is not a string or integer"},
		{name: "delete with new_key", in: fence(KindSynced, "delete", `"old_key":7`, `"new_key":7`), err: "delete needs old_key only"},
		{name: "delete without old_key", in: fence(KindSynced, "delete"), err: "delete needs old_key only"},
		{name: "float key", in: fence(KindSynced, "insert", `"new_key":1.5`), err: "key is not a string or integer"},
		{name: "integral float key", in: fence(KindSynced, "insert", `"new_key":1.0`), err: "key is not a string or integer"},
		{name: "exponent key", in: fence(KindSynced, "insert", `"new_key":1e3`), err: "key is not a string or integer"},
		{name: "int64 overflow key", in: fence(KindSynced, "insert", `"new_key":9223372036854775808`), err: "key is not a string or integer"},
		{name: "int64 underflow key", in: fence(KindSynced, "delete", `"old_key":-9223372036854775809`), err: "key is not a string or integer"},
		{name: "true key", in: fence(KindSynced, "insert", `"new_key":true`), err: "key is not a string or integer"},
		{name: "false key", in: fence(KindSynced, "delete", `"old_key":false`), err: "key is not a string or integer"},
		{name: "null key", in: fence(KindSynced, "insert", `"new_key":null`), err: "key is not a string or integer"},
		{name: "object key", in: fence(KindSynced, "insert", `"new_key":{"id":1}`), err: "key is not a string or integer"},
		{name: "array key", in: fence(KindSynced, "delete", `"old_key":[1]`), err: "key is not a string or integer"},
		{name: "malformed key", in: fence(KindSynced, "insert", `"new_key":01`), err: "invalid character"},
	}
}

func TestParseFence(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range fenceCases() {
		if seen[c.name] {
			t.Fatalf("duplicate case name %q", c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseFence([]byte(c.in))
			if c.want == nil {
				if err == nil {
					t.Fatalf("accepted %s", c.in)
				}
				if !strings.HasPrefix(err.Error(), "fence message: ") || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %q does not mention %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("rejected %s: %v", c.in, err)
			}
			if !reflect.DeepEqual(&got, c.want) {
				t.Fatalf("parsed %+v (old_key %s, new_key %s)\nwant   %+v (old_key %s, new_key %s)",
					got, got.OldKey, got.NewKey, *c.want, c.want.OldKey, c.want.NewKey)
			}
			if got.Key() != c.key {
				t.Fatalf("Key() = %q, want %q", got.Key(), c.key)
			}
		})
	}
}

// The trigger's layout takes the fast path.
func TestParseLayout(t *testing.T) {
	for _, in := range []string{
		benchFence,
		fence(KindSynced, "insert", `"new_key":"a-1"`),
		fence(KindSynced, "update", `"old_key":7`, `"new_key":7`),
		fence(KindSynced, "delete", `"old_key":"ключ"`),
		fence(KindDependency, "insert", `"new_key":-7`),
		fence(KindDependency, "update", `"old_key":"k"`, `"new_key":"k"`),
		fence(KindDependency, "delete", `"old_key":0`),
		sub(benchFence, `"schema":"bench"`, `"schema":"schéma"`),
	} {
		got, ok := parseLayout([]byte(in), nil)
		if !ok {
			t.Fatalf("not the trigger's layout: %s", in)
		}
		if want, err := decodeFence([]byte(in)); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("parseLayout(%s) = %+v, decodeFence: %+v, %v", in, got, want, err)
		}
	}
}

// A fence shares the target it is given when it applies to the same, and
// only then.
func TestFencesShareTheirTarget(t *testing.T) {
	first, err := ParseFence([]byte(benchFence))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in     string
		shared bool
	}{
		{sub(benchFence, `"ordinal":1`, `"ordinal":2`), true},
		{sub(sub(benchFence, `"op":"insert"`, `"op":"delete"`), `"new_key"`, `"old_key"`), true},
		{sub(benchFence, `"table_id":1`, `"table_id":2`), false},
		{sub(benchFence, `"relation_id":3`, `"relation_id":4`), false},
		{sub(benchFence, `"name":"items"`, `"name":"other"`), false},
		{fence(KindDependency, "insert", `"new_key":7`), false},
	} {
		f, err := parseFence([]byte(c.in), first.FenceTarget)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := decodeFence([]byte(c.in))
		if (f.FenceTarget == first.FenceTarget) != c.shared || !reflect.DeepEqual(f, want) {
			t.Fatalf("%s: target %+v shared %v, want %v and %+v", c.in, f.FenceTarget, f.FenceTarget == first.FenceTarget, c.shared, want.FenceTarget)
		}
	}
}

// FuzzParseLayout checks the fast path against encoding/json: what parseLayout
// accepts, decodeFence decodes to the same Fence, also when it may share a
// target.
func FuzzParseLayout(f *testing.F) {
	for _, c := range fenceCases() {
		f.Add([]byte(c.in))
	}
	shared, _ := ParseFence([]byte(benchFence))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, target := range []*FenceTarget{nil, shared.FenceTarget} {
			got, ok := parseLayout(b, target)
			if !ok {
				return
			}
			if want, err := decodeFence(b); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("parseLayout(%q) = %+v, decodeFence: %+v, %v", b, got, want, err)
			}
		}
	})
}

func TestKeyText(t *testing.T) {
	const invalid = "\x00invalid" // not a key
	for in, want := range map[string]string{
		`7`: "7", `-7`: "-7", `0`: "0", `-0`: "-0", ` 7 `: "7", "\u00a07": "7",
		`9223372036854775807`: "9223372036854775807", `9223372036854775808`: invalid,
		`"k"`: "k", ` "k" `: "k", `"\u0041\\"`: `A\`, `""`: "", `"\u0000"`: "\x00", `"k`: invalid, `"k"x`: invalid,
		`1.5`: invalid, `1.0`: invalid, `1e3`: invalid, `01`: invalid, `+1`: invalid, `- 1`: invalid, `1 2`: invalid,
		`true`: invalid, `null`: invalid, `{}`: invalid, `[1]`: invalid, ``: invalid,
	} {
		got, valid := KeyText(json.RawMessage(in))
		if !valid {
			got = invalid
		}
		if got != want {
			t.Errorf("KeyText(%q) = %q, %v, want %q", in, got, valid, want)
		}
	}
}

func BenchmarkParseFence(b *testing.B) {
	msg := []byte(benchFence)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseFence(msg); err != nil {
			b.Fatal(err)
		}
	}
}
