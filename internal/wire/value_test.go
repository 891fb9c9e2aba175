package wire

import (
	"encoding/json"
	"testing"
)

// AppendString renders a string as encoding/json does.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain text", `q"uote`, `back\slash`, "<&>", "é", "\x00\n\t", "\xff", "\u2028", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	})
}

// A number's text stays a JSON number when it is one, else it becomes a string;
// a negative zero is 0, as the jsonb images pull delivers hold it.
func TestNumberValues(t *testing.T) {
	for in, want := range map[string]string{
		"0": "0", "-0": "0", "12": "12", "-12": "-12", "1.5": "1.5", "-1e+20": "-1e+20", "1E3": "1E3",
		"01": `"01"`, "": `""`, "-": `"-"`, "1.": `"1."`, "NaN": `"NaN"`, "-Infinity": `"-Infinity"`, "12a": `"12a"`,
	} {
		got, err := Value(oidNumeric, in)
		if err != nil || string(got) != want {
			t.Errorf("Value(numeric, %q) = %s, %v, want %s", in, got, err, want)
		}
	}
}
