package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// readinessOrder is every readiness check in the fixed order of synchro.readiness.
var readinessOrder = []string{
	"database", "worker", "registry", "triggers", "publication", "slot", "poison",
	"positions", "heartbeat_age", "wal_lag", "commit_lag", "worker_database", "reset",
}

// readyzBody is the body of GET /readyz.
type readyzBody struct {
	Ready  bool `json:"ready"`
	Checks []struct {
		Check  string `json:"check"`
		OK     bool   `json:"ok"`
		Reason string `json:"reason"`
	} `json:"checks"`
}

func (b readyzBody) failing() []string {
	var out []string
	for _, c := range b.Checks {
		if !c.OK {
			out = append(out, c.Check)
		}
	}
	return out
}

func (b readyzBody) reason(check string) string {
	for _, c := range b.Checks {
		if c.Check == check {
			return c.Reason
		}
	}
	return ""
}

// getReadyz fetches GET /readyz from the server at base.
func getReadyz(base string) (int, readyzBody, string, error) {
	var body readyzBody
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0, body, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, body, "", err
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return resp.StatusCode, body, string(raw), fmt.Errorf("decode %q: %w", raw, err)
	}
	return resp.StatusCode, body, string(raw), nil
}

// checkReadyz reports whether a /readyz answer is well formed (every check in the
// fixed order, a reason on every failed one, status and ready agreeing) with
// exactly the failing checks given (none: ready, 200).
func checkReadyz(status int, body readyzBody, failing []string) bool {
	var names []string
	for _, c := range body.Checks {
		names = append(names, c.Check)
		if !c.OK && c.Reason == "" {
			return false
		}
	}
	wantStatus := http.StatusOK
	if len(failing) > 0 {
		wantStatus = http.StatusServiceUnavailable
	}
	want := slices.Clone(failing)
	slices.SortFunc(want, func(a, b string) int { return slices.Index(readinessOrder, a) - slices.Index(readinessOrder, b) })
	return slices.Equal(names, readinessOrder) && status == wantStatus && body.Ready == (len(failing) == 0) &&
		slices.Equal(body.failing(), want)
}

// waitReadyz waits until GET /readyz shows exactly the failing checks given (none:
// ready, 200); before each attempt it runs each (when set), e.g. to write WAL.
func waitReadyz(t *testing.T, base string, each func() error, failing ...string) readyzBody {
	t.Helper()
	var last string
	var body readyzBody
	waitForReadyz := func() (bool, error) {
		if each != nil {
			if err := each(); err != nil {
				return false, err
			}
		}
		status, b, raw, err := getReadyz(base)
		if err != nil {
			return false, err
		}
		last, body = fmt.Sprintf("%d %s", status, raw), b
		return checkReadyz(status, b, failing), nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := waitForReadyz()
		if err != nil {
			t.Fatalf("GET /readyz: %v", err)
		}
		if ok {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for /readyz to fail exactly %v; last answer: %s", failing, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// configureReadiness sets the readiness limits (SQL literals or NULL) with this
// database as the worker database.
func configureReadiness(t *testing.T, d *testdb.DB, heartbeat, walBytes, commit string) {
	t.Helper()
	d.Exec(t, fmt.Sprintf(`SELECT synchro.configure_readiness(%s, %s, %s, current_database())`, heartbeat, walBytes, commit))
}

const readinessSetup = `CREATE SCHEMA app;
	CREATE TABLE app.docs (id text PRIMARY KEY, owner text);
	CREATE TABLE app.items (id int PRIMARY KEY, doc text NOT NULL, qty int);
	CREATE TABLE app.parts (id bigint PRIMARY KEY, owner text) PARTITION BY RANGE (id);
	CREATE TABLE app.parts_1 PARTITION OF app.parts FOR VALUES FROM (0) TO (1000);
	CREATE TABLE app.noise (id bigserial PRIMARY KEY, v text);
	SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner}"}');
	SELECT synchro.register_table('app.items', '{"kind":"column","template":"doc:{doc}"}');
	SELECT synchro.register_table('app.parts', '{"kind":"column","template":"user:{owner}"}')`

// readyEnv is a database with a streaming worker, sane readiness limits and
// /readyz served over it, all healthy.
type readyEnv struct {
	d   *testdb.DB
	cfg wal.Config
	w   *runningWorker
	url string
}

func newReadyEnv(t *testing.T) *readyEnv {
	t.Helper()
	d := testdb.New(t)
	d.Exec(t, readinessSetup)
	cfg := workerConfig(d, "ready")
	w := startStreaming(t, d, cfg)
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	srv := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: d.Pool}))
	t.Cleanup(srv.Close)
	commitTxn(t, d, `INSERT INTO app.docs VALUES ('d1', 'u1'); INSERT INTO app.items VALUES (1, 'd1', 1);
		INSERT INTO app.parts VALUES (1, 'u1')`)
	waitMaterialized(t, d)
	e := &readyEnv{d: d, cfg: cfg, w: w, url: srv.URL}
	e.requireReady(t)
	return e
}

// requireReady waits until /readyz is 200 with every check ok, then checks that
// synchro.is_ready() agrees.
func (e *readyEnv) requireReady(t *testing.T) {
	t.Helper()
	waitReadyz(t, e.url, nil)
	if !queryBool(t, e.d, `SELECT synchro.is_ready()`) {
		// Readiness can change between two reads; it must become true again.
		waitFor(t, "synchro.is_ready()", 30*time.Second, func() (bool, error) {
			var ok bool
			err := e.d.Pool.QueryRow(context.Background(), `SELECT synchro.is_ready()`).Scan(&ok)
			return ok, err
		})
	}
}

// requireUnready waits until /readyz fails exactly the checks given, checks the
// reason of the first one and that synchro.is_ready() is false.
func (e *readyEnv) requireUnready(t *testing.T, each func() error, reason string, failing ...string) {
	t.Helper()
	body := waitReadyz(t, e.url, each, failing...)
	if got := body.reason(failing[0]); !strings.Contains(got, reason) {
		t.Fatalf("check %s failed with reason %q, want it to mention %q", failing[0], got, reason)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.readiness WHERE NOT ok AND "check" = $1`, failing[0]); n != 1 {
		t.Fatalf("synchro.readiness does not fail %s", failing[0])
	}
	if queryBool(t, e.d, `SELECT synchro.is_ready()`) {
		t.Fatalf("synchro.is_ready() is true while %v fail", failing)
	}
}

// restart stops the worker and starts it again under the same identity (so its
// heartbeat row is the one readiness sees), before which prepare runs.
func (e *readyEnv) restart(t *testing.T, prepare func()) {
	t.Helper()
	e.w.stop(t)
	waitSlotInactive(t, e.d, e.cfg.Slot)
	if prepare != nil {
		prepare()
	}
	e.w = startWorker(t, e.d, e.cfg)
}

// TestReadinessPingIsNotReady: a reachable, migrated database without a worker is
// not ready (a ping is liveness only): /readyz 503 listing every check,
// synchro.is_ready() false, while /healthz answers 200. Configuring the limits
// alone changes nothing.
func TestReadinessPingIsNotReady(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	srv := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: d.Pool}))
	defer srv.Close()
	if err := d.Pool.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}

	notStarted := []string{"worker", "registry", "slot", "positions", "heartbeat_age", "wal_lag", "commit_lag"}
	status, body, raw, err := getReadyz(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if !checkReadyz(status, body, append(slices.Clone(notStarted), "worker_database")) {
		t.Fatalf("fresh database: /readyz %d %s", status, raw)
	}
	if queryBool(t, d, `SELECT synchro.is_ready()`) {
		t.Fatal("synchro.is_ready() is true on a fresh database")
	}
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d, want 200", resp.StatusCode)
	}

	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	status, body, raw, err = getReadyz(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if !checkReadyz(status, body, notStarted) {
		t.Fatalf("configured database without worker: /readyz %d %s", status, raw)
	}
	if queryBool(t, d, `SELECT synchro.is_ready()`) {
		t.Fatal("synchro.is_ready() is true without a worker")
	}
}

// TestReadinessDatabaseUnreachable: when the readiness query fails, /readyz is
// 503 with one failed "database" check and no error text.
func TestReadinessDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(testdb.BaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	base.Path = "/synchro_no_such_database"
	missing, err := pgxpool.New(context.Background(), base.String())
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	unmigrated := testdb.Empty(t)
	for name, pool := range map[string]*pgxpool.Pool{"missing database": missing, "no Synchro schema": unmigrated.Pool, "no pool": nil} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(httpapi.NewRouter(httpapi.Deps{Pool: pool}))
			defer srv.Close()
			status, _, raw, err := getReadyz(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			want := `{"ready":false,"checks":[{"check":"database","ok":false,"reason":"database unreachable"}]}`
			if status != http.StatusServiceUnavailable || strings.TrimSpace(raw) != want {
				t.Fatalf("/readyz: %d %s, want 503 %s", status, raw, want)
			}
		})
	}
}

// TestReadinessChecks makes exactly one readiness check fail at a time, each on its
// own database that was healthy (200) first, and sees /readyz 503 naming it. Where
// the contract (docs/change-stream.md) ties two checks together (a dead worker
// also has a stale heartbeat; a worker blocked by a slot problem is not
// streaming), the case names both.
func TestReadinessChecks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		induce  func(t *testing.T, e *readyEnv) func() error // returns what to run before each poll
		reason  string
		failing []string
	}{
		{
			name: "database: function bundle missing",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `DELETE FROM synchro.function_bundle`)
				return nil
			},
			reason:  "function bundle",
			failing: []string{"database"},
		},
		{
			name: "worker: stopped, its heartbeat goes stale",
			induce: func(t *testing.T, e *readyEnv) func() error {
				configureReadiness(t, e.d, `'1 second'`, `1073741824`, `'60 seconds'`)
				e.w.stop(t)
				return nil
			},
			reason:  "no streaming worker with a fresh heartbeat",
			failing: []string{"worker", "heartbeat_age"},
		},
		{
			name: "worker: running but standing by, heartbeat fresh",
			induce: func(t *testing.T, e *readyEnv) func() error {
				// Another session holds the worker role (the worker's advisory lock).
				e.w.stop(t)
				conn, err := e.d.Pool.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`)
					conn.Release()
				})
				if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_lock(hashtext('synchro.worker'))`); err != nil {
					t.Fatal(err)
				}
				e.w = startWorker(t, e.d, e.cfg)
				waitState(t, e.d, e.cfg.WorkerID, "standby")
				return nil
			},
			reason:  "standby",
			failing: []string{"worker"},
		},
		{
			name: "registry: registered table renamed",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER TABLE app.docs RENAME TO documents`)
				return nil
			},
			reason:  "renamed or moved to app.documents",
			failing: []string{"registry"},
		},
		{
			name: "registry: registered table moved to another schema",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `CREATE SCHEMA other; ALTER TABLE app.items SET SCHEMA other`)
				return nil
			},
			reason:  "renamed or moved to other.items",
			failing: []string{"registry"},
		},
		{
			name: "registry: replica identity FULL",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER TABLE app.items REPLICA IDENTITY FULL`)
				return nil
			},
			reason:  "replica identity",
			failing: []string{"registry"},
		},
		{
			name: "registry: primary key changed",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER TABLE app.items DROP CONSTRAINT items_pkey, ADD PRIMARY KEY (doc)`)
				return nil
			},
			reason:  "primary key",
			failing: []string{"registry"},
		},
		{
			name: "registry: durable generation never activated",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `SELECT synchro.begin_registry_change('test: never activated')`)
				return nil
			},
			reason:  "not active",
			failing: []string{"registry"},
		},
		{
			name: "triggers: fence dropped",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `DROP TRIGGER synchro_fence ON app.docs`)
				return nil
			},
			reason:  "trigger synchro_fence on app.docs is missing",
			failing: []string{"triggers"},
		},
		{
			name: "triggers: truncate guard disabled",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER TABLE app.items DISABLE TRIGGER synchro_truncate_guard`)
				return nil
			},
			reason:  "trigger synchro_truncate_guard on app.items is disabled",
			failing: []string{"triggers"},
		},
		{
			name: "triggers: fence disabled on a partition",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER TABLE app.parts_1 DISABLE TRIGGER synchro_fence`)
				return nil
			},
			reason:  "trigger synchro_fence on app.parts_1 is disabled",
			failing: []string{"triggers"},
		},
		{
			name: "registry: replica identity FULL on a partition",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER TABLE app.parts_1 REPLICA IDENTITY FULL`)
				return nil
			},
			reason:  "app.parts has a partition with a replica identity other than DEFAULT",
			failing: []string{"registry"},
		},
		{
			name: "triggers: key guard fires only in replica sessions",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER TABLE app.docs ENABLE REPLICA TRIGGER synchro_key_guard`)
				return nil
			},
			reason:  "trigger synchro_key_guard on app.docs is disabled",
			failing: []string{"triggers"},
		},
		{
			name: "publication: registered table dropped from it",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER PUBLICATION synchro DROP TABLE app.docs`)
				return nil
			},
			reason:  "lacks registered relation app.docs",
			failing: []string{"publication"},
		},
		{
			name: "publication: unregistered table added",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER PUBLICATION synchro ADD TABLE app.noise`)
				return nil
			},
			reason:  "contains unregistered relation app.noise",
			failing: []string{"publication"},
		},
		{
			name: "slot: dropped (the restarted worker blocks)",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.restart(t, func() { e.d.Exec(t, `SELECT pg_drop_replication_slot($1)`, e.cfg.Slot) })
				return nil
			},
			reason:  "is missing",
			failing: []string{"slot", "worker", "positions", "wal_lag", "commit_lag"},
		},
		{
			name: "poison: quarantined transaction",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `SELECT synchro.quarantine('0/10', '0/20', 1, 'injected', NULL, NULL)`)
				return nil
			},
			reason:  "unresolved poison transaction",
			failing: []string{"poison"},
		},
		{
			name: "poison: TRUNCATE past a disabled guard blocks the worker",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `ALTER TABLE app.items DISABLE TRIGGER synchro_truncate_guard; TRUNCATE app.items`)
				waitPoison(t, e.d)
				return nil
			},
			reason:  "(truncate)",
			failing: []string{"poison", "worker", "triggers"},
		},
		{
			name: "positions: slot moved past the processed boundary",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.w.stop(t)
				waitSlotInactive(t, e.d, e.cfg.Slot)
				e.d.Exec(t, `INSERT INTO app.noise (v) VALUES ('past the processed boundary')`)
				e.d.Exec(t, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, e.cfg.Slot)
				// The stopped worker's heartbeat keeps saying streaming, so that
				// only positions fail: a worker that still streamed would block on
				// the moved slot at once.
				return func() error { return e.d.ExecErr(reportStreaming, e.cfg.WorkerID) }
			},
			reason:  "after the processed boundary",
			failing: []string{"positions"},
		},
		{
			name: "heartbeat_age: a heartbeat reports a registry generation after durable progress",
			induce: func(t *testing.T, e *readyEnv) func() error {
				return func() error {
					return e.d.ExecErr(`INSERT INTO synchro.worker_heartbeat AS h (worker_id, database_name, slot_name, state,
							heartbeat_at, registry_generation, started_at)
						VALUES ('ghost', current_database(), $1, 'standby', now(), 1000000, now())
						ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now()`, e.cfg.Slot)
				}
			},
			reason:  "after durable progress",
			failing: []string{"heartbeat_age"},
		},
		{
			name: "wal_lag: over a 1-byte limit",
			induce: func(t *testing.T, e *readyEnv) func() error {
				configureReadiness(t, e.d, `'10 seconds'`, `1`, `'60 seconds'`)
				return func() error { return e.d.ExecErr(`INSERT INTO app.noise (v) VALUES ('lag')`) }
			},
			reason:  "exceeds the limit of 1 bytes",
			failing: []string{"wal_lag"},
		},
		{
			name: "commit_lag: over a 1 ms limit",
			induce: func(t *testing.T, e *readyEnv) func() error {
				configureReadiness(t, e.d, `'10 seconds'`, `1073741824`, `'1 millisecond'`)
				return func() error { return e.d.ExecErr(`INSERT INTO app.noise (v) VALUES ('lag')`) }
			},
			reason:  "exceeds the limit 0.001s",
			failing: []string{"commit_lag"},
		},
		{
			name: "reset: a stream reset in progress holds the stream blocked",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `SELECT synchro.begin_reset('readiness test')`)
				return nil
			},
			reason:  "capture stays blocked until it is activated or aborted",
			failing: []string{"reset", "worker"},
		},
		{
			name: "worker_database: configured for another database",
			induce: func(t *testing.T, e *readyEnv) func() error {
				e.d.Exec(t, `SELECT synchro.configure_readiness('10 seconds', 1073741824, '60 seconds', 'elsewhere')`)
				return nil
			},
			reason:  "the configured Synchro database is elsewhere",
			failing: []string{"worker_database"},
		},
		{
			name: "worker_database: a worker connected to another database",
			induce: func(t *testing.T, e *readyEnv) func() error {
				return func() error {
					return e.d.ExecErr(`INSERT INTO synchro.worker_heartbeat AS h (worker_id, database_name, slot_name, state,
							heartbeat_at, started_at)
						VALUES ('elsewhere', 'elsewhere', $1, 'streaming', now(), now())
						ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now()`, e.cfg.Slot)
				}
			},
			reason:  "connected to database elsewhere",
			failing: []string{"worker_database"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newReadyEnv(t)
			each := tc.induce(t, e)
			e.requireUnready(t, each, tc.reason, tc.failing...)
		})
	}
}

// TestReadinessSlotMovedBlocksWorker: after the slot moved past the processed
// boundary, a restarted worker refuses to stream, so the worker check fails too.
func TestReadinessSlotMovedBlocksWorker(t *testing.T) {
	t.Parallel()
	e := newReadyEnv(t)
	e.restart(t, func() {
		e.d.Exec(t, `INSERT INTO app.noise (v) VALUES ('past the processed boundary')`)
		e.d.Exec(t, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, e.cfg.Slot)
	})
	e.requireUnready(t, nil, "after the processed boundary", "positions", "worker")
}

// TestReadinessWorkerOnAnotherPublication: a deploy whose migration named another
// capture publication (synchroctl migrate --publication) than the running worker
// streams: registration now adds relations to that one and readiness checks it,
// while the worker would never decode rows of a relation registered later. The
// worker blocks, saying which publications differ, and readiness fails; a worker
// started on the recorded publication streams again.
func TestReadinessWorkerOnAnotherPublication(t *testing.T) {
	t.Parallel()
	e := newReadyEnv(t)
	log := logTo(&e.cfg)
	e.restart(t, func() {
		if _, err := migrate.Apply(context.Background(), e.d.URL, "other", slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	})
	waitBlocked(t, e.d, e.cfg.WorkerID, 300*time.Millisecond)
	e.requireUnready(t, nil, "blocked", "worker")
	if got := log.String(); !strings.Contains(got, `publication \"synchro\"`) || !strings.Contains(got, `\"other\"`) {
		t.Fatalf("the worker log does not name both publications:\n%s", got)
	}
	e.restart(t, func() { e.cfg.Publication = "other" })
	e.requireReady(t)
}

// TestReadinessLimits: an omitted, non-positive or infinite limit is unbounded and
// not ready; restoring a finite limit makes the database ready again.
func TestReadinessLimits(t *testing.T) {
	t.Parallel()
	e := newReadyEnv(t)
	infinity := queryInt(t, e.d, `SELECT current_setting('server_version_num')::int`) >= 170000
	sane := func() { configureReadiness(t, e.d, `'10 seconds'`, `1073741824`, `'60 seconds'`) }
	cases := []struct {
		heartbeat, wal, commit string
		reason                 string
		failing                []string
	}{
		{`'10 seconds'`, `NULL`, `'60 seconds'`, "wal_lag_limit_bytes not configured", []string{"wal_lag"}},
		{`'10 seconds'`, `0`, `'60 seconds'`, "not a positive bound", []string{"wal_lag"}},
		{`'10 seconds'`, `-1`, `'60 seconds'`, "not a positive bound", []string{"wal_lag"}},
		{`'10 seconds'`, `1073741824`, `NULL`, "commit_lag_limit not configured", []string{"commit_lag"}},
		{`'10 seconds'`, `1073741824`, `'0 seconds'`, "unbounded", []string{"commit_lag"}},
		{`'10 seconds'`, `1073741824`, `'-1 second'`, "unbounded", []string{"commit_lag"}},
		// The worker check cannot judge freshness without a finite heartbeat limit.
		{`NULL`, `1073741824`, `'60 seconds'`, "heartbeat_max_age not configured", []string{"heartbeat_age", "worker"}},
		{`'0 seconds'`, `1073741824`, `'60 seconds'`, "unbounded", []string{"heartbeat_age", "worker"}},
	}
	if infinity {
		cases = append(cases,
			struct {
				heartbeat, wal, commit string
				reason                 string
				failing                []string
			}{`'10 seconds'`, `1073741824`, `'infinity'`, "unbounded", []string{"commit_lag"}},
			struct {
				heartbeat, wal, commit string
				reason                 string
				failing                []string
			}{`'infinity'`, `1073741824`, `'60 seconds'`, "unbounded", []string{"heartbeat_age", "worker"}})
	} else if err := e.d.ExecErr(`SELECT synchro.configure_readiness('infinity', 1, '1 second', current_database())`); sqlState(err) != "22007" {
		// Before PostgreSQL 17 an interval cannot be infinite at all.
		t.Fatalf("configuring an infinite interval on PostgreSQL < 17: %v, want SQLSTATE 22007", err)
	}
	for _, tc := range cases {
		configureReadiness(t, e.d, tc.heartbeat, tc.wal, tc.commit)
		e.requireUnready(t, nil, tc.reason, tc.failing...)
		sane()
		e.requireReady(t)
	}
	e.d.Exec(t, `SELECT synchro.configure_readiness('10 seconds', 1073741824, '60 seconds', NULL)`)
	e.requireUnready(t, nil, "worker_database not configured", "worker_database")
}

// TestReadinessRoles: operators read readiness and configure its limits; the HTTP
// service role only reads it.
func TestReadinessRoles(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	for _, sql := range []string{
		`SELECT * FROM synchro.readiness`,
		`SELECT synchro.is_ready()`,
		`SELECT synchro.configure_readiness('10 seconds', 1073741824, '60 seconds', current_database())`,
	} {
		if err := asRole(t, d, "synchro_operator", sql); err != nil {
			t.Errorf("operator role cannot run %q: %v", sql, err)
		}
	}
	// The HTTP service role reads readiness (GET /readyz, the pull gate) but
	// cannot change its limits.
	for _, sql := range []string{`SELECT * FROM synchro.readiness`, `SELECT synchro.is_ready()`} {
		if err := asRole(t, d, "synchro_service", sql); err != nil {
			t.Errorf("service role cannot run %q: %v", sql, err)
		}
	}
	sql := `SELECT synchro.configure_readiness('10 seconds', 1073741824, '60 seconds', current_database())`
	if err := asRole(t, d, "synchro_service", sql); sqlState(err) != "42501" {
		t.Errorf("service role ran %q: %v", sql, err)
	}
}

// TestSynchrodConfiguresReadiness: synchrod sets the readiness limits from its
// flags and environment at startup and serves /readyz, which becomes ready with
// its worker (capture batch limits given too); a non-positive limit refuses to
// start.
func TestSynchrodConfiguresReadiness(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(buildCommands(t), "synchrod")
	d := testdb.New(t)
	d.Exec(t, readinessSetup)

	code, _, stderr := run(t, bin, "--database-url", d.URL, "--listen", "127.0.0.1:0", "--max-commit-lag", "0s")
	if code == 0 || !strings.Contains(stderr, "must be positive") {
		t.Fatalf("synchrod with --max-commit-lag 0s: exit %d, stderr %q", code, stderr)
	}

	code, _, stderr = run(t, bin, "--database-url", d.URL, "--listen", "127.0.0.1:0", env("SYNCHRO_CAPTURE_BATCH_EVENTS=0"))
	if code == 0 || !strings.Contains(stderr, "--capture-batch-events must be positive") {
		t.Fatalf("synchrod with SYNCHRO_CAPTURE_BATCH_EVENTS=0: exit %d, stderr %q", code, stderr)
	}

	code, _, stderr = run(t, bin, "--database-url", d.URL, "--listen", "127.0.0.1:0", "--capture-history-retention", "-1s")
	if code == 0 || !strings.Contains(stderr, "--capture-history-retention not negative") {
		t.Fatalf("synchrod with --capture-history-retention -1s: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = run(t, bin, "--database-url", d.URL, "--listen", "127.0.0.1:0", "--history-retention", "-1s")
	if code == 0 || !strings.Contains(stderr, "--history-retention must not be negative") {
		t.Fatalf("synchrod with --history-retention -1s: exit %d, stderr %q", code, stderr)
	}

	addr, slot := freeAddr(t), synchrodSlot()
	startSynchrod(t, d, bin, addr, slot, "--database-url", d.URL, "--listen", addr, "--slot", slot,
		"--heartbeat-interval", "100ms", "--max-heartbeat-age", "7s", "--max-commit-lag", "42s",
		"--capture-batch-txns", "5", "--capture-spill-bytes", "4096", "--capture-spill-dir", t.TempDir(),
		env("SYNCHRO_MAX_WAL_LAG_BYTES=123456789", "SYNCHRO_CAPTURE_BATCH_DELAY=5ms", "SYNCHRO_CAPTURE_HISTORY_RETENTION=1h"))
	got := rowsOf(t, d, `SELECT extract(epoch FROM heartbeat_max_age)::float8, wal_lag_limit_bytes, extract(epoch FROM commit_lag_limit)::float8,
		worker_database = current_database() FROM synchro.settings`)
	if want := []string{"7|123456789|42|true"}; !slices.Equal(got, want) {
		t.Fatalf("settings after synchrod start: %v, want %v", got, want)
	}
	waitReadyz(t, "http://"+addr, nil)
}
