package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/testdb"
)

func TestMigrateApplyTwice(t *testing.T) {
	d := testdb.Empty(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	if err := migrate.Check(ctx, d.Pool); !errors.Is(err, migrate.ErrStale) {
		t.Fatalf("Check on an empty database: %v, want ErrStale", err)
	}
	first, err := migrate.Apply(ctx, d.URL, "synchro", log)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Applied) == 0 || !first.BundleChanged || first.Unchanged() || first.SchemaVersion == 0 {
		t.Fatalf("first run: %+v; want migrations applied and the bundle installed", first)
	}
	if first.BundleDigest != migrate.BundleDigest() {
		t.Fatalf("first run installed digest %s, build has %s", first.BundleDigest, migrate.BundleDigest())
	}
	// The URL synchrod is given may carry pgx's pool settings; migrate takes it too.
	second, err := migrate.Apply(ctx, d.URL+"&pool_max_conns=2", "synchro", log)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Unchanged() || len(second.Applied) != 0 || second.BundleChanged || second.SchemaVersion != first.SchemaVersion {
		t.Fatalf("second run: %+v; want nothing changed at schema version %d", second, first.SchemaVersion)
	}
	if got := queryText(t, d, `SELECT digest FROM synchro.function_bundle`); got != migrate.BundleDigest() {
		t.Fatalf("recorded digest %s, want %s", got, migrate.BundleDigest())
	}
	if n := queryInt(t, d, `SELECT count(*) FROM pg_publication WHERE pubname = 'synchro'`); n != 1 {
		t.Fatalf("publication synchro missing")
	}
	if err := migrate.Check(ctx, d.Pool); err != nil {
		t.Fatalf("Check after migrating: %v", err)
	}

	// A changed digest is stale and is repaired by the next run.
	d.Exec(t, `UPDATE synchro.function_bundle SET digest = 'x'`)
	if err := migrate.Check(ctx, d.Pool); !errors.Is(err, migrate.ErrStale) {
		t.Fatalf("Check with a tampered digest: %v, want ErrStale", err)
	}
	third, err := migrate.Apply(ctx, d.URL, "synchro", log)
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Applied) != 0 || !third.BundleChanged {
		t.Fatalf("run after tampering: %+v; want only the bundle reinstalled", third)
	}
	if err := migrate.Check(ctx, d.Pool); err != nil {
		t.Fatalf("Check after repair: %v", err)
	}
}

// TestMigrateConcurrentDeployJobs: deploy jobs that migrate one empty database at
// the same moment all succeed; exactly one applies the migrations and installs
// the function bundle, the others find it done, and the database then matches
// this build.
func TestMigrateConcurrentDeployJobs(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	for round := range 2 {
		d := testdb.Empty(t)
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]migrate.Result, 3)
		errs := make([]error, len(results))
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = migrate.Apply(context.Background(), d.URL, "synchro", log)
			}()
		}
		close(start)
		wg.Wait()
		installed, applied := 0, 0
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: deploy job %d failed: %v", round, i, err)
			}
			if results[i].BundleChanged {
				installed++
			}
			if len(results[i].Applied) > 0 {
				applied++
			}
		}
		if installed != 1 || applied != 1 {
			t.Fatalf("round %d: %d jobs applied migrations and %d installed the bundle, want 1 and 1: %+v", round, applied, installed, results)
		}
		if err := migrate.Check(context.Background(), d.Pool); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestCommands runs the built synchrod and synchroctl binaries black-box. They are
// built once, here, and shared by the subtests.
func TestCommands(t *testing.T) {
	bin := buildCommands(t)
	synchroctl := filepath.Join(bin, "synchroctl")
	synchrod := filepath.Join(bin, "synchrod")

	t.Run("migrate applies then changes nothing", func(t *testing.T) {
		d := testdb.Empty(t)
		out := runOK(t, synchroctl, "migrate", "--database-url", d.URL)
		if !strings.HasPrefix(out, "applied ") || !strings.Contains(out, "installed") {
			t.Fatalf("first migrate printed %q", out)
		}
		out = runOK(t, synchroctl, "migrate", "--database-url", d.URL)
		if !strings.Contains(out, "nothing changed") {
			t.Fatalf("second migrate printed %q", out)
		}
		if got := queryText(t, d, `SELECT digest FROM synchro.function_bundle`); got != migrate.BundleDigest() {
			t.Fatalf("recorded digest %s, want %s", got, migrate.BundleDigest())
		}
	})

	t.Run("migrate reads SYNCHRO_DATABASE_URL", func(t *testing.T) {
		d := testdb.Empty(t)
		out := runOK(t, synchroctl, "migrate", env("SYNCHRO_DATABASE_URL="+d.URL))
		if !strings.HasPrefix(out, "applied ") {
			t.Fatalf("migrate printed %q", out)
		}
	})

	t.Run("migrate without a database fails", func(t *testing.T) {
		code, _, stderr := run(t, synchroctl, "migrate")
		if code == 0 || !strings.Contains(stderr, "--database-url") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("synchrod refuses an unmigrated database", func(t *testing.T) {
		d := testdb.Empty(t)
		code, _, stderr := run(t, synchrod, "--database-url", d.URL, "--listen", "127.0.0.1:0")
		if code == 0 || !strings.Contains(stderr, "synchroctl migrate") {
			t.Fatalf("exit %d, stderr %q; want a non-zero exit naming synchroctl migrate", code, stderr)
		}
	})

	t.Run("synchrod refuses a tampered function bundle", func(t *testing.T) {
		d := testdb.New(t)
		d.Exec(t, `UPDATE synchro.function_bundle SET digest = 'x'`)
		code, _, stderr := run(t, synchrod, "--database-url", d.URL, "--listen", "127.0.0.1:0")
		if code == 0 || !strings.Contains(stderr, "synchroctl migrate") {
			t.Fatalf("exit %d, stderr %q; want a non-zero exit naming synchroctl migrate", code, stderr)
		}
		// synchroctl migrate repairs it, and synchrod starts.
		out := runOK(t, synchroctl, "migrate", "--database-url", d.URL)
		if !strings.Contains(out, "installed") {
			t.Fatalf("migrate after tampering printed %q", out)
		}
		addr, slot := freeAddr(t), synchrodSlot()
		startSynchrod(t, d, synchrod, addr, slot, "--database-url", d.URL, "--listen", addr, "--slot", slot)
	})

	t.Run("synchrod names the role, not migrate, when it may not read the schema", func(t *testing.T) {
		d := testdb.New(t)
		// Member of the service role only (as docs/operations.md, "Database roles", asks for
		// the HTTP connections): synchrod's own statements need the schema owner.
		service := loginAs(t, d, "synchro_service")
		code, _, stderr := run(t, synchrod, "--database-url", service, "--listen", "127.0.0.1:0", "--worker=false")
		if code != 1 || !strings.Contains(stderr, "may not read Synchro's schema") || !strings.Contains(stderr, "permission denied") ||
			strings.Contains(stderr, "schema differs") {
			t.Fatalf("exit %d, stderr %q; want exit 1 naming the missing privilege, not a stale schema", code, stderr)
		}
		// The same database is current: migrate changes nothing.
		if out := runOK(t, synchroctl, "migrate", "--database-url", d.URL); !strings.Contains(out, "nothing changed") {
			t.Fatalf("migrate printed %q", out)
		}
	})

	t.Run("help exits 0 with the usage on stdout", func(t *testing.T) {
		for _, c := range []struct {
			args []any
			want string
		}{
			{[]any{"--help"}, "commands:"},
			{[]any{"-h"}, "commands:"},
			{[]any{"help"}, "commands:"},
			{[]any{"poison", "-h"}, "usage: synchroctl poison list | show ID | retry ID"},
			{[]any{"registry", "--help"}, "usage: synchroctl registry list"},
			{[]any{"client", "-h"}, "usage: synchroctl client sync --db FILE"},
		} {
			code, stdout, stderr := run(t, synchroctl, c.args...)
			if code != 0 || !strings.Contains(stdout, c.want) {
				t.Errorf("synchroctl %v: exit %d, stdout %q, stderr %q; want exit 0 and %q", c.args, code, stdout, stderr, c.want)
			}
		}
		if code, _, stderr := run(t, synchroctl, "bogus"); code != 2 || !strings.Contains(stderr, `unknown command "bogus"`) {
			t.Errorf("synchroctl bogus: exit %d, stderr %q; want exit 2 naming the command", code, stderr)
		}
	})

	t.Run("commands take no flag they would ignore", func(t *testing.T) {
		d := testdb.New(t)
		// status, poison and registry read the active stream whatever its slot;
		// migrate names no slot.
		for _, args := range [][]any{
			{"status", "--slot", "other", "--database-url", d.URL},
			{"status", "--publication", "other", "--database-url", d.URL},
			{"poison", "list", "--slot", "other", "--database-url", d.URL},
			{"registry", "list", "--publication", "other", "--database-url", d.URL},
			{"migrate", "--slot", "other", "--database-url", d.URL},
		} {
			code, stdout, stderr := run(t, synchroctl, args...)
			if code != 1 || stdout != "" || !strings.Contains(stderr, "flag provided but not defined") {
				t.Errorf("synchroctl %v: exit %d, stdout %q, stderr %q; want the flag refused", args, code, stdout, stderr)
			}
		}
		// The environment synchrod reads does not get in their way.
		out := runOK(t, synchroctl, "registry", "list", env("SYNCHRO_DATABASE_URL="+d.URL, "SYNCHRO_SLOT=other", "SYNCHRO_PUBLICATION=other"))
		if !strings.HasPrefix(out, "RELATION_ID") {
			t.Fatalf("registry list printed %q", out)
		}
	})

	t.Run("synchrod refuses settings it would replace or read as unbounded", func(t *testing.T) {
		// Before: a heartbeat interval of 0 ran as 1s, a negative
		// --max-user-requests as no bound; neither is what the flag says.
		for _, c := range []struct{ flag, value string }{
			{"--heartbeat-interval", "0"}, {"--heartbeat-interval", "-1s"}, {"--max-user-requests", "-1"},
		} {
			code, _, stderr := run(t, synchrod, c.flag, c.value, "--database-url", "postgres://127.0.0.1:1/none", "--listen", "127.0.0.1:0")
			if code != 1 || !strings.Contains(stderr, c.flag) {
				t.Errorf("synchrod %s %s: exit %d, stderr %q; want exit 1 naming the flag", c.flag, c.value, code, stderr)
			}
		}
	})

	t.Run("docs/operations.md names every synchrod flag and synchroctl command", func(t *testing.T) {
		readme, err := os.ReadFile("../docs/operations.md")
		if err != nil {
			t.Fatal(err)
		}
		code, _, usage := run(t, synchrod, "-h")
		flags := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(usage, -1)
		if code != 0 || len(flags) < 30 {
			t.Fatalf("synchrod -h: exit %d, %d flags found in %q", code, len(flags), usage)
		}
		for _, f := range flags {
			if !strings.Contains(string(readme), "`--"+f[1]+"`") {
				t.Errorf("docs/operations.md does not name synchrod's --%s", f[1])
			}
		}
		help := runOK(t, synchroctl, "--help")
		cmds := regexp.MustCompile(`(?m)^  ([a-z-]+) `).FindAllStringSubmatch(help, -1)
		if len(cmds) < 6 {
			t.Fatalf("synchroctl --help lists %d commands: %q", len(cmds), help)
		}
		for _, c := range cmds {
			if !strings.Contains(string(readme), "synchroctl "+c[1]) {
				t.Errorf("docs/operations.md does not show synchroctl %s", c[1])
			}
		}
	})

	t.Run("synchrod serves healthz", func(t *testing.T) {
		d := testdb.New(t)
		addr, slot := freeAddr(t), synchrodSlot()
		startSynchrod(t, d, synchrod, addr, slot, "--database-url", d.URL, "--listen", addr, "--slot", slot)
	})

	t.Run("synchrod reads SYNCHRO_DATABASE_URL, SYNCHRO_LISTEN and SYNCHRO_SLOT", func(t *testing.T) {
		d := testdb.New(t)
		addr, slot := freeAddr(t), synchrodSlot()
		startSynchrod(t, d, synchrod, addr, slot, env("SYNCHRO_DATABASE_URL="+d.URL, "SYNCHRO_LISTEN="+addr, "SYNCHRO_SLOT="+slot))
	})

	t.Run("registry list", func(t *testing.T) {
		d := testdb.New(t)
		lines := func() []string {
			out := runOK(t, synchroctl, "registry", "list", "--database-url", d.URL)
			return strings.Split(strings.TrimRight(out, "\n"), "\n")
		}
		if got := lines(); len(got) != 1 || !strings.HasPrefix(got[0], "RELATION_ID") {
			t.Fatalf("empty registry listed as %q; want the header only", got)
		}

		d.Exec(t, `CREATE SCHEMA app;
			CREATE TABLE app.orgs (id text PRIMARY KEY);
			CREATE TABLE app.docs (id bigint PRIMARY KEY, org_id text REFERENCES app.orgs);
			CREATE TABLE app.acl (id int PRIMARY KEY);
			SELECT synchro.register_table('app.docs', '{"kind":"path","path":["org_id"],"template":"org:{id}"}',
				'{"name":"documents","push_policy":"read_only"}');
			SELECT synchro.register_dependency('app.acl')`)
		got := lines()
		if len(got) != 4 {
			t.Fatalf("listed %d lines, want a header and 3 relations:\n%s", len(got), strings.Join(got, "\n"))
		}
		header := strings.Fields(got[0])
		if header[0] != "RELATION_ID" || !slices.Contains(header, "KIND") || !slices.Contains(header, "RELATION") {
			t.Fatalf("header %q", got[0])
		}
		want := map[string][]string{
			"app.orgs": {"capture_dependency", "id", "string", "-"},
			"app.docs": {"synced", "id", "int64", "documents", "read_only"},
			"app.acl":  {"capture_dependency", "id", "int", "-"},
		}
		for _, line := range got[1:] {
			fields := strings.Fields(line)
			if len(fields) < 3 {
				t.Fatalf("line %q", line)
			}
			wantFields, ok := want[fields[2]]
			if !ok {
				t.Fatalf("unexpected relation in line %q", line)
			}
			delete(want, fields[2])
			rid := relationID(t, d, fields[2])
			if fields[0] != fmt.Sprint(rid) {
				t.Fatalf("line %q: relation id %s, want %d", line, fields[0], rid)
			}
			for _, f := range wantFields {
				if !slices.Contains(fields, f) {
					t.Fatalf("line %q lacks %q", line, f)
				}
			}
		}
		if len(want) != 0 {
			t.Fatalf("relations not listed: %v", want)
		}
	})

	t.Run("flags after positional arguments", func(t *testing.T) {
		d := testdb.New(t)
		// As docs/operations.md writes them: the id first, then --database-url (and --json).
		for _, args := range [][]any{
			{"poison", "show", "1", "--database-url", d.URL},
			{"poison", "retry", "1", "--database-url", d.URL},
			{"poison", "show", "--json", "1", "--database-url", d.URL},
			{"poison", "show", "1", env("SYNCHRO_DATABASE_URL=" + d.URL)},
		} {
			code, stdout, stderr := run(t, synchroctl, args...)
			if code == 0 || stdout != "" || !strings.Contains(stderr, "no blocking poison transaction with id 1") {
				t.Errorf("synchroctl %v: exit %d, stdout %q, stderr %q; want the id looked up and not found", args, code, stdout, stderr)
			}
		}
		if out := runOK(t, synchroctl, "poison", "list", "--json", "--database-url", d.URL); strings.TrimSpace(out) != "[]" {
			t.Errorf("synchroctl poison list --json printed %q", out)
		}
		if out := runOK(t, synchroctl, "registry", "list", "--database-url", d.URL, "--json"); strings.TrimSpace(out) != "[]" {
			t.Errorf("synchroctl registry list --json printed %q", out)
		}
		// Leftovers are refused with the usage, before connecting.
		for _, c := range []struct {
			args []any
			want string
		}{
			{[]any{"poison", "show", "1", "2", "--database-url", d.URL}, `unexpected arguments ["2"]`},
			{[]any{"poison", "retry", "1", "--database-url", d.URL, "--", "--json"}, `unexpected arguments ["--json"]`},
			{[]any{"poison", "list", "1", "--database-url", d.URL}, `unexpected arguments ["1"]`},
			{[]any{"registry", "list", "all", "--database-url", d.URL}, `unexpected arguments ["all"]`},
			{[]any{"status", "now", "--database-url", d.URL}, `unexpected arguments ["now"]`},
			{[]any{"poison", "show", "--database-url", d.URL}, "usage: synchroctl poison"},
			{[]any{"poison", "retry", "1", "--force", "--database-url", d.URL}, "flag provided but not defined: -force"},
			{[]any{"poison", "drop", "1", "--database-url", d.URL}, "usage: synchroctl poison"},
		} {
			code, stdout, stderr := run(t, synchroctl, c.args...)
			if code == 0 || stdout != "" || !strings.Contains(stderr, c.want) {
				t.Errorf("synchroctl %v: exit %d, stdout %q, stderr %q; want a non-zero exit and %q", c.args, code, stdout, stderr, c.want)
			}
		}
	})
}

// buildCommands builds synchrod and synchroctl into a directory that lives as
// long as the calling test.
func buildCommands(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/synchrod", "./cmd/synchroctl")
	cmd.Dir = ".." // the repository root, relative to this package
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// envVars is an extra environment for a command.
type envVars []string

func env(vars ...string) envVars { return envVars(vars) }

// command prepares a binary run with an environment free of SYNCHRO_ settings,
// plus any envVars among args; the other args are the command line.
func command(ctx context.Context, bin string, args ...any) *exec.Cmd {
	var argv []string
	var environ []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SYNCHRO_") {
			environ = append(environ, e)
		}
	}
	for _, a := range args {
		switch a := a.(type) {
		case string:
			argv = append(argv, a)
		case envVars:
			environ = append(environ, a...)
		default:
			panic(fmt.Sprintf("command: argument %v of type %T", a, a))
		}
	}
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = environ
	return cmd
}

// run runs a command to completion (with a deadline) and returns its exit code,
// stdout and stderr.
func run(t *testing.T, bin string, args ...any) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := command(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish in time; stderr:\n%s", filepath.Base(bin), args, stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", filepath.Base(bin), err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

func runOK(t *testing.T, bin string, args ...any) string {
	t.Helper()
	code, stdout, stderr := run(t, bin, args...)
	if code != 0 {
		t.Fatalf("%s %v exited %d; stderr:\n%s", filepath.Base(bin), args, code, stderr)
	}
	return stdout
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

var synchrodSeq atomic.Int64

// synchrodSlot is a replication slot name for one synchrod run: slot names are
// cluster-wide, and the capture worker creates its slot.
func synchrodSlot() string {
	return fmt.Sprintf("synchrod_%d_%d", os.Getpid(), synchrodSeq.Add(1))
}

// startSynchrod starts synchrod on database d and waits (at most 20 s) until GET
// /healthz on addr answers 200 with status "alive". stop, which the test's end
// calls too, stops it with SIGTERM, expecting a clean exit; the worker's slot is
// dropped when the test ends.
func startSynchrod(t *testing.T, d *testdb.DB, bin, addr, slot string, args ...any) (stop func()) {
	t.Helper()
	cmd := command(context.Background(), bin, args...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var exitedEarly bool
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if exitedEarly {
				return
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("synchrod did not shut down cleanly: %v; stderr:\n%s", err, stderr.String())
				}
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Errorf("synchrod ignored SIGTERM for 20 s; killed")
			}
		})
	}
	t.Cleanup(func() {
		// The slot may exist once the worker started; drop it after the process is gone.
		defer d.DropSlot(t, slot)
		stop()
	})

	url := "http://" + addr + "/healthz"
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.After(20 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"alive"`) {
				t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
			}
			return stop
		}
		select {
		case exitErr := <-exited:
			exitedEarly = true
			t.Fatalf("synchrod exited before serving: %v; stderr:\n%s", exitErr, stderr.String())
		case <-deadline:
			t.Fatalf("GET %s did not answer within 20 s: %v; stderr:\n%s", url, err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a writing process and a reading test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// migrateDownTo runs the Down sections of the schema migrations after version,
// newest first, and returns those migrations' versions in order.
func migrateDownTo(t *testing.T, d *testdb.DB, version int64) []int64 {
	t.Helper()
	down, err := gooseProvider(t, d).DownTo(context.Background(), version)
	if err != nil {
		t.Fatal(err)
	}
	var later []int64
	for _, r := range down {
		later = append([]int64{r.Source.Version}, later...)
	}
	if len(later) == 0 {
		t.Fatalf("no migration after version %d to roll back", version)
	}
	return later
}

// migrateUpAgain migrates the database and checks that exactly the migrations
// later (rolled back by migrateDownTo) were applied again.
func migrateUpAgain(t *testing.T, d *testdb.DB, later []int64) {
	t.Helper()
	res, err := migrate.Apply(context.Background(), d.URL, "synchro", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Applied, later) {
		t.Fatalf("applied migrations %v, want %v", res.Applied, later)
	}
}

// TestMigrationRecordsTypesOfRegisteredColumns: a database that registered
// relations before migration 00006 gets their captured columns' types and
// attribute numbers from the catalog, as registration records them now, and
// readiness sees no drift.
func TestMigrationRecordsTypesOfRegisteredColumns(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.t (id int PRIMARY KEY, gone bigint, v text, w varchar(20), x boolean);
		ALTER TABLE app.t DROP COLUMN gone;
		SELECT synchro.register_table('app.t', '{"kind":"shared","scope":"all"}', '{"exclude_columns":["x"]}')`)
	recorded := `SELECT columns::text, column_types::regtype[]::text, column_attnums::text FROM synchro.relation`
	want := rowsOf(t, d, recorded)
	if !slices.Equal(want, []string{`{id,v,w}|{integer,text,"character varying"}|{1,3,4}`}) {
		t.Fatalf("registration recorded %v", want)
	}
	// Back to schema version 5, then migrate.
	later := migrateDownTo(t, d, 5)
	migrateUpAgain(t, d, later)
	if got := rowsOf(t, d, recorded); !slices.Equal(got, want) {
		t.Fatalf("migration recorded %v, want %v", got, want)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.catalog_drift()`); n != 0 {
		t.Fatalf("%d relations drifted after the migration", n)
	}
}

// TestMigrationRecordsPartitionsOfRegisteredRelations: a database that
// registered a partitioned relation before migration 00007 gets its
// partitions, at every level, recorded as they are, and readiness sees no
// drift.
func TestMigrationRecordsPartitionsOfRegisteredRelations(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.p (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (10) PARTITION BY RANGE (id);
		CREATE TABLE app.p1a PARTITION OF app.p1 FOR VALUES FROM (0) TO (5);
		CREATE TABLE app.t (id int PRIMARY KEY);
		SELECT synchro.register_table('app.p', '{"kind":"shared","scope":"all"}');
		SELECT synchro.register_table('app.t', '{"kind":"shared","scope":"all"}');
		CREATE TABLE app.p2 PARTITION OF app.p FOR VALUES FROM (10) TO (20)`)
	recorded := `SELECT partition_name FROM synchro.relation_partition ORDER BY 1`
	if got := rowsOf(t, d, recorded); !slices.Equal(got, []string{"app.p1", "app.p1a"}) {
		t.Fatalf("registration recorded %v", got)
	}
	// Back to schema version 6, then migrate: the partition created after
	// registration is recorded too.
	later := migrateDownTo(t, d, 6)
	migrateUpAgain(t, d, later)
	if got := rowsOf(t, d, recorded); !slices.Equal(got, []string{"app.p1", "app.p1a", "app.p2"}) {
		t.Fatalf("migration recorded %v", got)
	}
	// app.p2 was never guarded: capture blocks until guard_partitions guards it
	// and the owner attests that it was not truncated meanwhile.
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); len(got) != 1 ||
		!strings.HasPrefix(got[0], "app.p has partition app.p2 without a truncate guard") {
		t.Fatalf("catalog drift after the migration: %v, want the unguarded app.p2", got)
	}
	d.Exec(t, `SELECT synchro.guard_partitions()`)
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); len(got) != 1 ||
		!strings.HasPrefix(got[0], "app.p has partition app.p2 whose guards changed since recorded") {
		t.Fatalf("catalog drift after guard_partitions: %v, want the new guards of app.p2", got)
	}
	d.Exec(t, `SELECT synchro.accept_partition_guards('app.p')`)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.catalog_drift()`); n != 0 {
		t.Fatalf("%d relations drifted after accept_partition_guards", n)
	}
}

// TestMigrationMakesGuardsFireAlways: truncate and partition guards installed
// before migration 00009 fired in ordinary sessions only (ENABLE), so a
// replica session (a subscription's apply worker) could TRUNCATE a partition
// unseen; the migration makes them fire in every session (ENABLE ALWAYS) and
// leaves a disabled one disabled (capture blocks on it). Its Down section
// restores ordinary firing.
func TestMigrationMakesGuardsFireAlways(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.p (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (10);
		CREATE TABLE app.p2 PARTITION OF app.p FOR VALUES FROM (10) TO (20);
		SELECT synchro.register_table('app.p', '{"kind":"shared","scope":"all"}')`)
	guards := `SELECT tgrelid::regclass || ' ' || tgname || ' ' || tgenabled::text FROM pg_trigger
		WHERE tgname IN ('synchro_truncate_guard', 'synchro_partition_guard') ORDER BY tgrelid::regclass::text, tgname`
	want := func(p2Truncate string) []string {
		return []string{"app.p synchro_truncate_guard A", "app.p1 synchro_partition_guard A", "app.p1 synchro_truncate_guard A",
			"app.p2 synchro_partition_guard A", "app.p2 synchro_truncate_guard " + p2Truncate}
	}
	if got := rowsOf(t, d, guards); !slices.Equal(got, want("A")) {
		t.Fatalf("registration installed %v", got)
	}
	later := migrateDownTo(t, d, 8)
	ordinary := rowsOf(t, d, guards)
	if !slices.Equal(ordinary, []string{"app.p synchro_truncate_guard O", "app.p1 synchro_partition_guard O", "app.p1 synchro_truncate_guard O",
		"app.p2 synchro_partition_guard O", "app.p2 synchro_truncate_guard O"}) {
		t.Fatalf("after the Down section: %v", ordinary)
	}
	d.Exec(t, `ALTER TABLE app.p2 DISABLE TRIGGER synchro_truncate_guard`)
	migrateUpAgain(t, d, later)
	if got := rowsOf(t, d, guards); !slices.Equal(got, want("D")) {
		t.Fatalf("after the migration: %v", got)
	}
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); len(got) != 1 ||
		!strings.HasPrefix(got[0], "app.p has partition app.p2 without a truncate guard") {
		t.Fatalf("catalog drift: %v, want the disabled guard of app.p2", got)
	}
	if n := queryInt(t, d, `SELECT synchro.guard_partitions()`); n != 1 {
		t.Fatalf("guard_partitions enabled %d guards, want 1", n)
	}
	if got := rowsOf(t, d, guards); !slices.Equal(got, want("A")) {
		t.Fatalf("after guard_partitions: %v", got)
	}
}

// TestMigrationRecordsPartitionGuardsAndStorage: partitions recorded before
// migration 00010 get the fingerprint of their guards as they are, and tables
// registered and partitions recorded before 00011 their storage, so capture
// goes on (no drift); from then on a guard disabled and enabled again is drift
// until synchro.guard_partitions records it again.
func TestMigrationRecordsPartitionGuardsAndStorage(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, partitionedAndPlain)
	later := migrateDownTo(t, d, 9)
	migrateUpAgain(t, d, later)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.relation_partition rp JOIN synchro.partition_guards() g USING (relation_id, partition_oid)
		WHERE rp.guards = g.guards AND rp.guards LIKE '%synchro_partition_guard%synchro_truncate_guard%'`); n != 1 {
		t.Fatalf("%d partitions with both guards recorded as they are, want 1", n)
	}
	if n := queryInt(t, d, `SELECT (SELECT count(*) FROM synchro.relation r JOIN pg_class c ON c.oid = r.relation_oid
			WHERE r.relfilenode = c.relfilenode)
		+ (SELECT count(*) FROM synchro.relation_partition rp JOIN pg_class c ON c.oid = rp.partition_oid
			WHERE rp.relfilenode = c.relfilenode)`); n != 3 {
		t.Fatalf("%d tables with their storage recorded as it is, want 3", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.catalog_drift()`); n != 0 {
		t.Fatalf("%d relations drifted after the migration", n)
	}
	d.Exec(t, `ALTER TABLE app.p1 DISABLE TRIGGER synchro_truncate_guard; ALTER TABLE app.p1 ENABLE ALWAYS TRIGGER synchro_truncate_guard`)
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); len(got) != 1 ||
		!strings.HasPrefix(got[0], "app.p has partition app.p1 whose guards changed") {
		t.Fatalf("catalog drift: %v, want the changed guards of app.p1", got)
	}
	if n := queryInt(t, d, `SELECT synchro.guard_partitions()`); n != 0 {
		t.Fatalf("guard_partitions installed or enabled %d guards, want 0", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.catalog_drift()`); n != 1 {
		t.Fatalf("%d relations drifted after guard_partitions, want the changed guards still", n)
	}
	if n := queryInt(t, d, `SELECT synchro.accept_partition_guards('app.p')`); n != 1 {
		t.Fatalf("accept_partition_guards recorded %d partitions, want 1", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.catalog_drift()`); n != 0 {
		t.Fatalf("%d relations drifted after accept_partition_guards", n)
	}
}

// TestMigrationMakesCaptureTriggersFireAlways: key guards and fences installed
// before migration 00012 fired in ordinary sessions only, so a row written by
// a subscription's apply worker (a replica session) had no fence and blocked
// capture; the migration makes them fire in every session, also the clones on
// partitions, and its Down section restores ordinary firing.
func TestMigrationMakesCaptureTriggersFireAlways(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, partitionedAndPlain)
	triggers := `SELECT string_agg(DISTINCT tgenabled::text, ',') FROM pg_trigger WHERE tgname IN ('synchro_key_guard', 'synchro_fence')`
	count := `SELECT count(*) FROM pg_trigger WHERE tgname IN ('synchro_key_guard', 'synchro_fence')`
	if got, n := queryText(t, d, triggers), queryInt(t, d, count); got != "A" || n != 6 {
		t.Fatalf("registration installed %d key guards and fences firing %q, want 6 firing A", n, got)
	}
	later := migrateDownTo(t, d, 11)
	if got := queryText(t, d, triggers); got != "O" {
		t.Fatalf("after the Down section the key guards and fences fire %q, want O", got)
	}
	migrateUpAgain(t, d, later)
	if got, n := queryText(t, d, triggers), queryInt(t, d, count); got != "A" || n != 6 {
		t.Fatalf("after the migration %d key guards and fences fire %q, want 6 firing A", n, got)
	}
}

// partitionedAndPlain registers a partitioned table with one partition
// (app.p, app.p1) and a plain one (app.t).
const partitionedAndPlain = `CREATE SCHEMA app;
	CREATE TABLE app.p (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id);
	CREATE TABLE app.p1 PARTITION OF app.p FOR VALUES FROM (0) TO (10);
	CREATE TABLE app.t (id int PRIMARY KEY, v text);
	SELECT synchro.register_table('app.p', '{"kind":"shared","scope":"all"}');
	SELECT synchro.register_table('app.t', '{"kind":"shared","scope":"all"}')`

// TestMigrationLeavesEnumLabelsToTheWorker: migration 00013 records no enum
// labels for relations registered before it; the worker records them at its
// first catalog check, after which renaming a value is catalog drift.
func TestMigrationLeavesEnumLabelsToTheWorker(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TYPE app.mood AS ENUM ('sad', 'happy');
		CREATE TABLE app.e (id int PRIMARY KEY, m app.mood, n text);
		SELECT synchro.register_table('app.e', '{"kind":"shared","scope":"all"}')`)
	const labels = `SELECT count(*) FROM synchro.relation_enum_label el JOIN pg_enum e ON e.oid = el.enum_value AND e.enumlabel = el.label`
	if n := queryInt(t, d, labels); n != 2 {
		t.Fatalf("registration recorded %d enum labels, want 2", n)
	}
	later := migrateDownTo(t, d, 12)
	migrateUpAgain(t, d, later)
	if n := queryInt(t, d, labels); n != 0 {
		t.Fatalf("the migration recorded %d enum labels, want none", n)
	}
	startStreaming(t, d, workerConfig(d, "w1"))
	waitFor(t, "the worker recording enum labels", 30*time.Second, func() (bool, error) {
		return queryInt(t, d, labels) == 2, nil
	})
	d.Exec(t, `ALTER TYPE app.mood RENAME VALUE 'happy' TO 'glad'`)
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); len(got) != 1 ||
		!strings.HasPrefix(got[0], "app.e has a recorded value of enum type app.mood renamed") {
		t.Fatalf("catalog drift: %v, want the renamed value of app.mood", got)
	}
}

// TestMigrationRecordsRegisteredColumnXmins: migration 00016 records the
// registered columns of every registered table and recorded partition as they
// are, so that storage changed before it (a VACUUM FULL) is no drift and the
// worker's first check records it; a rewrite in place afterwards is drift even
// once later DDL wrote the table's catalog row again.
func TestMigrationRecordsRegisteredColumnXmins(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, partitionedAndPlain)
	d.Exec(t, `VACUUM FULL app.t`)
	d.Exec(t, `VACUUM FULL app.p1`)
	later := migrateDownTo(t, d, 15)
	migrateUpAgain(t, d, later)
	if n := queryInt(t, d, `SELECT (SELECT count(*) FROM synchro.relation r WHERE r.column_xmins = synchro.column_xmins(r.relation_oid, r.columns))
		+ (SELECT count(*) FROM synchro.relation_partition rp JOIN synchro.relation r USING (relation_id)
			WHERE rp.column_xmins = synchro.column_xmins(rp.partition_oid, r.columns))`); n != 3 {
		t.Fatalf("%d tables with their registered columns recorded as they are, want 3", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.catalog_drift()`); n != 0 {
		t.Fatalf("%d relations drifted after the migration", n)
	}
	if n := queryInt(t, d, `SELECT synchro.record_storage()`); n != 2 {
		t.Fatalf("record_storage recorded %d tables, want the 2 with new storage", n)
	}
	d.Exec(t, `ALTER TABLE app.t ALTER COLUMN v TYPE text USING upper(v)`)
	d.Exec(t, `ALTER TABLE app.t ADD COLUMN extra int`)
	if n := queryInt(t, d, `SELECT synchro.record_storage()`); n != 0 {
		t.Fatalf("record_storage recorded %d tables after a rewrite, want none", n)
	}
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); len(got) != 1 ||
		!strings.HasPrefix(got[0], "app.t had registered column v rewritten in place in app.t") {
		t.Fatalf("catalog drift: %v, want the rewrite of app.t", got)
	}
}

// TestMigrationMovesPendingPushFences: migration 00018 makes fences immutable.
// A push's fence not yet materialized (materialized_lsn NULL before) becomes
// pending for its client in synchro.fence_pending, which the capture gate
// reads; a materialized one (the event ledger names it) and a direct write's
// (no client) do not. Its Down section marks fences materialized again from
// the event ledger.
func TestMigrationMovesPendingPushFences(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.t (id text PRIMARY KEY, v text);
		SELECT synchro.register_table('app.t', '{"kind":"shared","scope":"all"}')`)
	d.Exec(t, `SELECT set_config('synchro.client_id', 'c1', true); INSERT INTO app.t VALUES ('a', 'x'), ('b', 'y')`)
	d.Exec(t, `INSERT INTO app.t VALUES ('c', 'z')`)
	// Fence a materialized, as materialization leaves it.
	d.Exec(t, `INSERT INTO synchro.event_ledger (stream_generation, commit_lsn, event_ordinal, relation_id, op, key, fence_id, version)
		SELECT gen_random_uuid(), '0/10', 0, relation_id, op, key, fence_id, version FROM synchro.fence WHERE key = 'a';
		DELETE FROM synchro.fence_pending WHERE fence_id = (SELECT fence_id FROM synchro.fence WHERE key = 'a')`)
	later := migrateDownTo(t, d, 17)
	fences := `SELECT key || ' ' || coalesce(client_id, '-') || ' ' || coalesce(materialized_lsn::text, 'pending') FROM synchro.fence ORDER BY key`
	if got := rowsOf(t, d, fences); strings.Join(got, ", ") != "a c1 0/10, b c1 pending, c - pending" {
		t.Fatalf("after the Down section, fences %v", got)
	}
	migrateUpAgain(t, d, later)
	if got := rowsOf(t, d, `SELECT f.key || ' ' || p.client_id FROM synchro.fence_pending p JOIN synchro.fence f USING (fence_id)`); len(got) != 1 || got[0] != "b c1" {
		t.Fatalf("pending push fences %v, want b of c1", got)
	}
}
