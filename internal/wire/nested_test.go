package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// Valid, Members, Elements and AppendObject read and write JSON nested deeper
// than encoding/json's 10,000 levels (PostgreSQL stores such json), with
// numbers beyond float64, and refuse what is not JSON.
func TestNestedJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + "1e400" + strings.Repeat("]", n) }
	if json.Valid([]byte(deep(10001))) {
		t.Fatal("encoding/json takes 10,001 levels now: this fallback may go")
	}
	for _, tc := range []struct {
		in    string
		valid bool
	}{
		{deep(10001), true}, {deep(10000), true}, {`{"a":` + deep(20000) + `}`, true}, {"1e400", true}, {`"x"`, true},
		{deep(10001) + "]", false}, {deep(10001) + " 1", false}, {"[" + deep(10001), false}, {`[` + deep(10001) + `,]`, false},
		{`{"a" ` + deep(10001) + `}`, false}, {`{"a":` + deep(10001) + `,"b"}`, false}, {"", false}, {"nul", false},
	} {
		if got := Valid([]byte(tc.in)); got != tc.valid {
			t.Errorf("Valid(%.40s...) = %v, want %v", tc.in, got, tc.valid)
		}
	}
	if got, err := Value(oidJSON, deep(10001)); err != nil || string(got) != deep(10001) {
		t.Fatalf("Value(json, 10,001 deep) = %.40s, %v", got, err)
	}

	for _, obj := range []string{
		`{"b": 2, "a": ` + deep(3) + `}`,
		` { "b" : 2 ,"a":` + deep(10001) + ` } `,
		`{"b":2,"a":1,"a":` + deep(10001) + `}`, // the last one, as jsonb takes it
	} {
		ms, err := Members([]byte(obj))
		if err != nil || len(ms) != 2 || ms[0].Name != "a" || ms[1].Name != "b" || string(ms[1].Value) != "2" || !strings.HasSuffix(string(ms[0].Value), "]") {
			t.Fatalf("Members(%.60s) = %d members, %v", obj, len(ms), err)
		}
		back := AppendObject(nil, ms)
		if !Valid(back) || !strings.HasPrefix(string(back), `{"a":[[[`) || !strings.HasSuffix(string(back), `],"b":2}`) {
			t.Fatalf("AppendObject: %.60s", back)
		}
	}
	for _, bad := range []string{`[1]`, `{"a":` + deep(10001), `{"a":` + deep(10001) + `} {}`, `null`} {
		if _, err := Members([]byte(bad)); err == nil {
			t.Errorf("Members(%.40s) took it", bad)
		}
	}
	els, err := Elements([]byte(` [ 1 , ` + deep(10001) + ` ,"x"]`))
	if err != nil || len(els) != 3 || string(els[0]) != "1" || string(els[1]) != deep(10001) || string(els[2]) != `"x"` {
		t.Fatalf("Elements: %d, %v", len(els), err)
	}
	if _, err := Elements([]byte(`[` + deep(10001) + `,`)); err == nil {
		t.Error("Elements took an unfinished array")
	}
}
