package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// TestParse: a flag reads the variable its usage names, the command line wins
// over it, a flag whose usage names none reads nothing, and a malformed value
// is an error naming the variable.
func TestParse(t *testing.T) {
	t.Setenv("SYNCHRO_TEST_LISTEN", "from-env")
	t.Setenv("SYNCHRO_TEST_WAIT", "3s")
	t.Setenv("SYNCHRO_TEST_GIVEN", "from-env")
	t.Setenv("PAGE", "7")
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	listen := fs.String("listen", "default", "address (env SYNCHRO_TEST_LISTEN)")
	wait := fs.Duration("wait", time.Second, "how long (env SYNCHRO_TEST_WAIT); 0 = never")
	given := fs.String("given", "default", "given on the command line (env SYNCHRO_TEST_GIVEN)")
	page := fs.Int("page", 1, "page size, no variable (PAGE is not named as one)")
	if err := Parse(fs, []string{"--given", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if *listen != "from-env" || *wait != 3*time.Second || *given != "from-flag" || *page != 1 {
		t.Fatalf("listen %q, wait %s, given %q, page %d; want from-env, 3s, from-flag, 1", *listen, *wait, *given, *page)
	}

	t.Setenv("SYNCHRO_TEST_WAIT", "soon")
	fs = flag.NewFlagSet("test", flag.ContinueOnError)
	fs.Duration("wait", time.Second, "how long (env SYNCHRO_TEST_WAIT)")
	if err := Parse(fs, nil); err == nil || !strings.Contains(err.Error(), "environment variable SYNCHRO_TEST_WAIT") {
		t.Fatalf("malformed variable: error %v, want one naming SYNCHRO_TEST_WAIT", err)
	}
}
