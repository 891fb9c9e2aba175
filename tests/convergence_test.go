package tests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/client"
	"github.com/synchro-sync/synchro/internal/httpapi"
	"github.com/synchro-sync/synchro/internal/reset"
	"github.com/synchro-sync/synchro/internal/wal"
)

// The convergence simulation (TestConvergence): a seeded, randomized run of many
// SDK replicas against one server while the data, the scope memberships, the
// scope assignments and the registry change underneath them and faults hit every
// layer. In the middle of the run a stream reset rebuilds the stream, a table
// that holds rows (app.issues, written by SQL from the start) is registered and
// bootstrapped while the steps go on, and a rule change (app.cards from
// user:{owner_id} to user:{reviewer_id}) moves rows between users' scopes.
// Throughout, the pull history is pruned to a retention horizon seconds behind
// the newest transaction, which replicas away longer and laggards' rebuild
// sessions fall behind (convergence_retention_test.go). At the
// end every replica must hold exactly its user's scopes, every mutation must have
// one recorded outcome that the replica agrees with, and the capture ledgers must
// hold every source transaction and effect exactly once.
//
//	SYNCHRO_SEED          the seed (default simDefaultSeed)
//	SYNCHRO_SIM_DURATION  a number of steps (default simDefaultSteps) or a Go
//	                      duration ("10m") the run lasts
//
// Every random choice of the driver (and of each replica's faulty network) comes
// from math/rand/v2 sources seeded with the seed, and the driver is
// single-threaded, so a seed replays the same sequence of choices. Which rows
// they touch depends on what each replica had pulled, which depends on how far
// the worker had materialized at that moment: a failing seed reproduces most of
// the time, not always (run it with the same SYNCHRO_SIM_DURATION a few times).
// `make soak SEED=... DURATION=...` runs long ones.
//
// The test is not parallel: it shuts the test cluster down (immediate mode) and
// restarts it, which must not hit another test's connections (parallel tests of
// this package run only after every sequential one has returned; no other
// package uses the cluster).

const (
	simDefaultSeed  = 20260320
	simDefaultSteps = 400
	simClients      = 22
)

// simUsers have replicas; simOrphan owns rows but has none, so rows moved to it
// leave every replica.
var (
	simUsers  = []string{"u1", "u2", "u3", "u4", "u5"}
	simOrphan = "u6"
	simTeams  = []string{"red", "blue", "green"}
	simTables = []string{"cards", "docs", "notes", "reports", "tasks", "templates"}
)

// The registry changes of the run: app.issues is registered in the middle of
// it (it holds rows by then), app.cards' rule moves from one owner column to
// the other (and back, in a long run).
const (
	issuesRule = `{"kind":"column","template":"user:{owner_id}"}`
	cardsRule  = `{"kind":"column","template":"user:{%s}"}`
)

// convergenceSetup adds the fifth rule kind, a custom sql rule, to syncSchema's
// four: reports belong to user:<member> for every member of their team (a
// dependency relation the rule reads through its projection). Scope assignment
// is a custom function over app.extra_scopes, a table the test writes. Cards
// have two owner columns, the rule reads one (reconfigureCards switches it);
// issues are not registered yet (registerIssues).
const convergenceSetup = `
CREATE TABLE app.reports (id text PRIMARY KEY, team text, title text);
CREATE TABLE app.team_members (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, team text NOT NULL, user_id text NOT NULL);
SELECT synchro.register_dependency('app.team_members');
SELECT synchro.register_table('app.reports', $${"kind":"sql",
  "membership":"SELECT 'user:' || (m.image->>'user_id') FROM synchro.projected('app.team_members') m WHERE m.image->>'team' = $1->>'team'",
  "impacts":{"app.team_members":"SELECT r.key FROM synchro.projected('app.reports') r WHERE r.image->>'team' = $1->>'team'"}}$$);
CREATE TABLE app.extra_scopes (user_id text NOT NULL, scope text NOT NULL, PRIMARY KEY (user_id, scope));
CREATE FUNCTION app.scopes_for(user_id text) RETURNS SETOF text LANGUAGE sql STABLE AS $f$
    SELECT 'user:' || scopes_for.user_id
    UNION ALL SELECT e.scope FROM app.extra_scopes e WHERE e.user_id = scopes_for.user_id
$f$;
SELECT synchro.set_scope_assignment('app.scopes_for(text)');
CREATE TABLE app.cards (id text PRIMARY KEY, owner_id text NOT NULL, reviewer_id text NOT NULL, title text);
SELECT synchro.register_table('app.cards', '{"kind":"column","template":"user:{owner_id}"}');
CREATE TABLE app.issues (id text PRIMARY KEY, owner_id text NOT NULL, title text, n integer NOT NULL DEFAULT 0);
`

// simPlan is what the environment asks for.
type simPlan struct {
	seed     uint64
	steps    int           // > 0: the run has this many steps
	duration time.Duration // > 0: the run lasts this long
	arg      string        // SYNCHRO_SIM_DURATION as given (for the reproduce line)
}

func simPlanFromEnv(t *testing.T) simPlan {
	t.Helper()
	p := simPlan{seed: simDefaultSeed, steps: simDefaultSteps, arg: strconv.Itoa(simDefaultSteps)}
	if v := strings.TrimSpace(os.Getenv("SYNCHRO_SEED")); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SYNCHRO_SEED=%q: want an unsigned decimal integer", v)
		}
		p.seed = n
	}
	if v := strings.TrimSpace(os.Getenv("SYNCHRO_SIM_DURATION")); v != "" {
		p.arg = v
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			p.steps = n
		} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
			p.steps, p.duration = 0, d
		} else {
			t.Fatalf("SYNCHRO_SIM_DURATION=%q: want a number of steps (e.g. 500) or a duration (e.g. 10m)", v)
		}
	}
	return p
}

func (p simPlan) String() string {
	if p.duration > 0 {
		return fmt.Sprintf("duration %s", p.duration)
	}
	return fmt.Sprintf("%d steps", p.steps)
}

// simClient is one replica of the simulation.
type simClient struct {
	*sdkClient
	cfg client.Config
	ft  *faultTransport
	// sent: mutation ids the replica put on the wire in a push body.
	sent map[string]bool
	// queued: every mutation id seen in the replica's queue, as last seen.
	queued map[string]queuedMutation
	// laggard: one of simLaggards; offlineUntil: its syncs are skipped until
	// then; returning: its first sync back is still to come.
	laggard      bool
	offlineUntil time.Time
	returning    bool
}

type queuedMutation struct {
	tbl, pk, op string
	base        bool // carried a base_version
}

// workerHook stops the worker at a chosen step boundary (as a crash would),
// after skipping some occurrences. It runs on the worker's goroutine.
type workerHook struct {
	mu    sync.Mutex
	step  wal.Step // "" = disarmed
	skip  int
	fired int
}

func (h *workerHook) after(s wal.Step) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.step == "" || s != h.step {
		return nil
	}
	if h.skip > 0 {
		h.skip--
		return nil
	}
	h.step = ""
	h.fired++
	return fmt.Errorf("injected worker crash after step %s", s)
}

func (h *workerHook) arm(s wal.Step, skip int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.step, h.skip = s, skip
}

// sim is the simulation's driver. Everything but the worker and the hook runs
// on the test goroutine (the SDK's HTTP round trips included).
type sim struct {
	// retiredFences counts, per "client_id/mutation_id", the push fences that
	// stream reset retirements removed.
	retiredFences map[string]int

	t    *testing.T
	e    *syncEnv
	plan simPlan
	rng  *rand.Rand
	dir  string

	clients []*simClient
	nextID  int

	// worker
	cfg        wal.Config
	hook       *workerHook
	workerUp   bool
	restartAt  int // step at which a stopped worker restarts
	workerKill int

	// faults
	chaos        bool
	pgData       string
	pgPort       string
	pgDown       bool
	nextCrash    int // step of the next PostgreSQL crash (-1: never)
	crashes      int
	customAssign bool

	// retention (see convergence_retention_test.go)
	pruner       *simPruner
	nextOvertake int // step from which a laggard's rebuild session is held until the horizon passes it (-1: never)

	// stream reset (see startReset)
	nextReset int           // step at which the next stream reset starts (-1: never)
	resetting *runningReset // the reset or bootstrap coordinator running beside the steps (nil: none)
	activated []string      // ids of the activated resets, oldest first
	retireAt  int           // step at which the old generation of the last activated reset is retired (-1: never)
	resetLog  *lockedBuffer // the coordinators' logs, for a failure message

	// registry changes (see registerIssues, reconfigureCards)
	nextRegister    int      // step at which app.issues is registered (-1: done)
	nextReconfigure int      // step of the next rule change of app.cards (-1: never)
	issuesServed    bool     // app.issues' bootstrap is activated
	cardsColumn     string   // the owner column of app.cards' current rule
	changes         []string // ids of the registry changes (stream_reset rows of kind bootstrap), oldest first

	step    int
	final   bool // the faults stopped: settling and checking
	started time.Time
	recent  []string
	stats   map[string]int
	healing []string
}

// TestConvergence: see the comment at the top of this file.
func TestConvergence(t *testing.T) {
	plan := simPlanFromEnv(t)
	t.Logf("convergence simulation: SYNCHRO_SEED=%d, %s, %d clients over %d users", plan.seed, plan, simClients, len(simUsers))
	s := &sim{t: t, plan: plan, rng: rand.New(rand.NewPCG(plan.seed, 0x5eed)), stats: map[string]int{}, retiredFences: map[string]int{}, nextCrash: -1, restartAt: -1,
		nextReset: -1, retireAt: -1, resetLog: &lockedBuffer{}, nextRegister: -1, nextReconfigure: -1, cardsColumn: "owner_id"}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last steps before the failure:\n  %s", strings.Join(s.recent, "\n  "))
			where := fmt.Sprintf("at step %d", s.step)
			if s.final {
				where = fmt.Sprintf("in the final checks after %d steps", s.step)
			}
			t.Logf("convergence simulation FAILED %s with SYNCHRO_SEED=%d; reproduce with SYNCHRO_SEED=%d make soak SEED=%d DURATION=%s",
				where, plan.seed, plan.seed, plan.seed, plan.arg)
		}
	})
	s.setup()
	s.run()
	s.finish()
}

// setup starts the server with the schema, seeds data from the seed, opens the
// replicas and syncs each once (no faults yet).
func (s *sim) setup() {
	t := s.t
	s.e = newSyncEnv(t, convergenceSetup, func(sy *httpapi.Sync) {
		// Pulls of a client whose pushes wait for a stopped worker answer 503
		// capture_pending soon, so a Sync during a worker outage stays short.
		sy.CaptureWait = 500 * time.Millisecond
	})
	s.customAssign = true
	s.dir = t.TempDir()

	// The PostgreSQL restart fault needs the private cluster of
	// scripts/with-cluster.sh, and must hit the cluster this test uses.
	s.pgData, s.pgPort = os.Getenv("SYNCHRO_TEST_PGDATA"), os.Getenv("SYNCHRO_TEST_PG_PORT")
	if s.pgData != "" {
		u, err := url.Parse(s.e.d.URL)
		if err != nil || u.Port() != s.pgPort {
			t.Fatalf("SYNCHRO_TEST_PGDATA is set but SYNCHRO_TEST_PG_PORT=%q is not the port of the test database %s: refusing to crash a cluster this test does not use", s.pgPort, s.e.d.URL)
		}
		if s.plan.steps > 0 {
			s.nextCrash = s.plan.steps/4 + s.rng.IntN(s.plan.steps/2+1)
		} else {
			s.nextCrash = 40 + s.rng.IntN(120)
		}
	} else {
		t.Logf("WARNING: SYNCHRO_TEST_PGDATA is not set: the PostgreSQL immediate-shutdown fault is NOT exercised (run through scripts/with-cluster.sh, as make test and make soak do)")
	}
	// A stream reset in the middle of the chaos phase (then periodically, in a
	// run that lasts a duration); the slots it creates go at the end of the
	// test, once the worker stopped (dropResetSlots).
	s.nextReset = s.middleStep()
	dropResetSlots(t, s.e)
	// The registration of the populated app.issues and a rule change of
	// app.cards, each at a step of the middle of the run (rule changes go on
	// periodically in a run that lasts a duration).
	s.nextRegister, s.nextReconfigure = s.middleStep(), s.middleStep()

	// The worker runs with the crash hook from now on.
	s.hook = &workerHook{}
	s.cfg = s.e.cfg
	s.cfg.AfterStep = s.hook.after
	s.e.w.stop(t)
	s.e.w = startStreaming(t, s.e.d, s.cfg)
	s.workerUp = true
	s.startPruner()
	s.nextOvertake = s.rng.IntN(40)

	s.seedData()
	waitMaterialized(t, s.e.d)

	for i := range simClients {
		c := s.openClient(i)
		s.clients = append(s.clients, c)
		if _, err := c.SyncReport(context.Background()); err != nil {
			t.Fatalf("%s: first sync: %v", c.name, err)
		}
	}
	s.chaos = true
	s.started = time.Now()
}

// middleStep is a step of the middle of the run, drawn from the seed: in its
// middle half, or early in a run that lasts a duration.
func (s *sim) middleStep() int {
	if s.plan.steps > 0 {
		return s.plan.steps/4 + s.rng.IntN(s.plan.steps/2+1)
	}
	return 60 + s.rng.IntN(120)
}

// seedData writes the initial rows: every table, every kind of membership.
func (s *sim) seedData() {
	var b strings.Builder
	owner := func() string { return s.anyUser() }
	for range 8 {
		fmt.Fprintf(&b, "INSERT INTO app.projects VALUES (%s, %s);\n", lit(s.newID("p")), lit(owner()))
	}
	s.e.d.Exec(s.t, b.String())
	b.Reset()
	projects := s.serverIDs(`SELECT id FROM app.projects ORDER BY id`)
	for range 24 {
		fmt.Fprintf(&b, "INSERT INTO app.docs (id, owner_id, title, n) VALUES (%s, %s, 'seed', %d);\n", lit(s.newID("d")), lit(owner()), s.rng.IntN(100))
	}
	for range 30 {
		fmt.Fprintf(&b, "INSERT INTO app.tasks VALUES (%d, %s, 'seed');\n", s.newNum(), lit(projects[s.rng.IntN(len(projects))]))
	}
	for range 10 {
		id := s.newID("n")
		fmt.Fprintf(&b, "INSERT INTO app.notes VALUES (%s, 'seed');\n", lit(id))
		for _, u := range s.someUsers(1 + s.rng.IntN(3)) {
			fmt.Fprintf(&b, "INSERT INTO app.note_members (note_id, user_id) VALUES (%s, %s);\n", lit(id), lit(u))
		}
	}
	for _, u := range append(slices.Clone(simUsers), simOrphan) {
		for _, team := range s.someTeams(1 + s.rng.IntN(2)) {
			fmt.Fprintf(&b, "INSERT INTO app.team_members (team, user_id) VALUES (%s, %s);\n", lit(team), lit(u))
		}
	}
	for range 12 {
		fmt.Fprintf(&b, "INSERT INTO app.reports VALUES (%s, %s, 'seed');\n", lit(s.newID("r")), lit(simTeams[s.rng.IntN(len(simTeams))]))
	}
	for i := 1; i <= 4; i++ {
		fmt.Fprintf(&b, "INSERT INTO app.templates VALUES (%d, 'template %d');\n", i, i)
	}
	for _, u := range simUsers {
		fmt.Fprintf(&b, "INSERT INTO app.extra_scopes VALUES (%s, 'templates_public');\n", lit(u))
	}
	fmt.Fprintf(&b, "INSERT INTO app.extra_scopes VALUES ('u1', 'user:u2'), ('u3', 'user:u6');\n")
	for range 12 {
		fmt.Fprintf(&b, "INSERT INTO app.cards VALUES (%s, %s, %s, 'seed');\n", lit(s.newID("c")), lit(owner()), lit(owner()))
	}
	for range 30 {
		fmt.Fprintf(&b, "INSERT INTO app.issues VALUES (%s, %s, 'seed', %d);\n", lit(s.newID("i")), lit(owner()), s.rng.IntN(100))
	}
	s.e.d.Exec(s.t, b.String())
}

// openClient opens replica i: users round-robin, every other replica behind a
// faulty network, page sizes from the seed.
func (s *sim) openClient(i int) *simClient {
	name := fmt.Sprintf("c%02d", i)
	user := simUsers[i%len(simUsers)]
	c := &simClient{sent: map[string]bool{}, queued: map[string]queuedMutation{}, laggard: isLaggard(i)}
	c.ft = &faultTransport{s: s, c: c, faulty: i%2 == 1, rng: rand.New(rand.NewPCG(s.plan.seed, uint64(i)+1)), listed: map[string]bool{}}
	sizes := []int{1, 2, 3, 5, 8, 100}
	c.cfg = client.Config{
		ServerURL: s.e.url, ClientID: name, Platform: "sim", AppVersion: "1.0.0",
		Token:       func(context.Context) (string, error) { return token(s.t, user), nil },
		HTTPClient:  &http.Client{Transport: c.ft, Timeout: 30 * time.Second},
		PageSize:    sizes[s.rng.IntN(len(sizes))],
		MaxAttempts: 6, BackoffBase: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
	}
	if c.laggard {
		c.cfg.PageSize = 2 // rebuild sessions of many pages
	}
	c.sdkClient = &sdkClient{name: name, user: user, path: filepath.Join(s.dir, name+".sqlite")}
	s.reopen(c)
	return c
}

// reopen opens (again) the replica's database, as an application restart would.
func (s *sim) reopen(c *simClient) {
	cl, err := client.Open(context.Background(), c.path, c.cfg)
	if err != nil {
		s.t.Fatalf("%s: open: %v", c.name, err)
	}
	s.t.Cleanup(func() { cl.Close() })
	c.Client = cl
}

// run drives the randomized steps.
func (s *sim) run() {
	for s.step = 0; ; s.step++ {
		if s.plan.steps > 0 && s.step >= s.plan.steps {
			break
		}
		if s.plan.duration > 0 && time.Since(s.started) >= s.plan.duration {
			break
		}
		s.maintainWorker()
		s.maintainReset(false)
		if s.step == s.nextCrash {
			if s.resetting != nil {
				s.nextCrash++ // not while a reset runs: see startReset
			} else {
				s.crashPostgres()
				continue
			}
		}
		if s.nextReset >= 0 && s.step >= s.nextReset && s.resetting == nil && !s.registryChangePending() {
			s.startReset()
			continue
		}
		if s.nextRegister >= 0 && s.step >= s.nextRegister && s.resetting == nil && !s.registryChangePending() {
			s.registerIssues()
			continue
		}
		if s.nextReconfigure >= 0 && s.step >= s.nextReconfigure && s.resetting == nil && !s.registryChangePending() {
			s.reconfigureCards()
			continue
		}
		if s.retireAt >= 0 && s.step >= s.retireAt {
			s.retireReset()
			continue
		}
		switch r := s.rng.IntN(100); {
		case r < 30:
			s.clientWrites(s.pickClient())
		case r < 62:
			for range 1 + s.rng.IntN(3) {
				s.sync(s.pickClient())
			}
		case r < 82:
			s.serverWrites()
		case r < 89:
			s.assignmentChange()
		case r < 94:
			s.workerFault()
		default:
			c := s.pickClient()
			s.logf("%s: application restart (close and reopen the database)", c.name)
			c.Close()
			s.reopen(c)
			s.stats["client restarts"]++
		}
	}
	s.t.Logf("chaos phase: %d steps in %s", s.step, time.Since(s.started).Round(time.Millisecond))
}

func (s *sim) logf(format string, args ...any) {
	line := fmt.Sprintf("step %d: ", s.step) + fmt.Sprintf(format, args...)
	s.recent = append(s.recent, line)
	if len(s.recent) > 60 {
		s.recent = s.recent[1:]
	}
}

// ---- worker faults ----

// workerExited reports whether the worker stopped by itself (a hook fired),
// and what Run returned.
func workerExited(w *runningWorker) (bool, error) {
	select {
	case err, ok := <-w.done:
		if ok {
			close(w.done)
		}
		return true, err
	default:
		return false, nil
	}
}

// maintainWorker restarts a worker a hook stopped, or a stopped one whose
// outage is over.
func (s *sim) maintainWorker() {
	if s.workerUp {
		if ok, err := workerExited(s.e.w); ok {
			if !errors.Is(err, wal.ErrStopped) {
				s.t.Fatalf("the worker exited by itself with %v", err)
			}
			s.logf("worker stopped by the hook (%v); restarting it", err)
			s.stats["worker crashes at a step boundary"]++
			s.workerUp = false
			s.startWorker()
		}
		return
	}
	if s.step >= s.restartAt && !s.pgDown {
		s.startWorker()
	}
}

func (s *sim) startWorker() {
	s.logf("worker restarted")
	s.e.w = startStreaming(s.t, s.e.d, s.cfg)
	s.workerUp, s.restartAt = true, -1
}

func (s *sim) workerFault() {
	if !s.workerUp {
		return
	}
	if s.rng.IntN(2) == 0 {
		steps := []wal.Step{wal.StepReceived, wal.StepMaterialized, wal.StepSlotAdvanced, wal.StepAcknowledged}
		st, skip := steps[s.rng.IntN(len(steps))], s.rng.IntN(3)
		s.logf("worker: crash armed after step %s (skipping %d)", st, skip)
		s.hook.arm(st, skip)
		s.stats["worker crash hooks armed"]++
		return
	}
	down := s.rng.IntN(4)
	s.logf("worker killed; down for %d steps", down)
	if err := s.e.w.stop(s.t); err != nil && !errors.Is(err, wal.ErrStopped) {
		s.t.Fatalf("stopping the worker: %v", err)
	}
	s.workerUp, s.restartAt = false, s.step+down
	s.stats["worker kills"]++
}

// crashPostgres shuts the test cluster down in immediate mode (no checkpoint:
// the restart runs crash recovery), makes a replica write and try to sync while
// it is down, and restarts it. The worker recovers by itself.
func (s *sim) crashPostgres() {
	t := s.t
	s.logf("PostgreSQL immediate shutdown")
	s.hook.arm("", 0) // the worker must come back by itself: no crash hook in the way
	s.pgScript("crash", s.pgData)
	s.pgDown = true
	// A local write (no server reads while it is down) and a Sync that fails.
	c := s.pickClient()
	if id, ok := s.pickRow(s.localIDs(c, "docs")); ok {
		s.local(c, "update doc", `UPDATE docs SET title = ? WHERE id = ?`, fmt.Sprintf("%s@%d-down", c.name, s.step), id)
		s.snapshotQueue(c)
	}
	s.sync(c)
	s.pgScript("start", s.pgData, s.pgPort)
	s.pgDown = false
	s.logf("PostgreSQL restarted")
	s.e.d.Pool.Reset()
	waitFor(t, "PostgreSQL to accept connections after its restart", 60*time.Second, func() (bool, error) {
		_, err := s.e.d.Pool.Exec(context.Background(), `SELECT 1`)
		return err == nil, nil
	})
	s.maintainWorker() // restarts it only if a hook armed before the crash stopped it
	if s.workerUp {
		// Unless stopped on purpose, the worker was not restarted: its own session
		// retries must bring it back.
		waitMaterialized(t, s.e.d)
	}
	s.crashes++
	s.stats["PostgreSQL immediate shutdowns"]++
	if s.plan.duration > 0 {
		s.nextCrash = s.step + 300 + s.rng.IntN(400)
	}
}

// runningReset is a stream reset coordinator (reset.Run) or a projection
// bootstrap coordinator (reset.Bootstrap) running on a goroutine of its own
// beside the simulation's steps.
type runningReset struct {
	kind   string // "reset" or "bootstrap"
	step   int    // the step it started at
	retire bool
	delay  int // steps between its activation and its retirement
	done   chan resetOutcome

	// The coordinator is held at some of its points (reset.Config.AfterPoint)
	// for a few steps, so that the steps' writes and syncs land in each window
	// of the reset: holds is the steps at each point (fixed at the start);
	// the coordinator sends the point it waits at on at and goes on when
	// proceed is sent.
	holds   map[reset.Point]int
	at      chan reset.Point
	proceed chan struct{}
	held    reset.Point // the point it waits at ("": none)
	heldAt  int         // the step since which
}

type resetOutcome struct {
	res reset.Result
	err error
}

// startReset starts a stream reset that ends activated (reset.Run with
// Activate), on a goroutine, and returns: the simulation keeps taking its
// steps while the reset blocks the old stream, stages its baseline under the
// candidate slot's exported snapshot, catches up through its barrier and
// activates the new generation, so replicas write, push and sync (pulls answer
// 503 not_ready until the activation; after it, every old cursor is answered
// with its scope in rebuild and the SDK rebuilds it by itself), the server
// writes and assignments change throughout. The worker keeps running (blocked
// while the reset holds the old stream; after the activation it follows the
// active-slot pointer to the candidate slot by itself); its kills and crash
// hooks go on meanwhile, but no PostgreSQL crash hits a running reset (the
// coordinator is not meant to survive one in mid-statement; its own crash tests
// cover that): crashPostgres waits for it. maintainReset notices the end
// (finish waits for it before the final phase); half of the resets have their
// old generation retired a few steps after the activation (retireReset).
func (s *sim) startReset() {
	r := s.startCoordinator("reset", reset.Run)
	r.retire, r.delay = s.rng.IntN(2) == 0, s.rng.IntN(20)
	s.logf("stream reset started (held at %v; retire the old generation afterwards: %v)", r.holds, r.retire)
	s.stats["stream resets started"]++
	if s.plan.duration > 0 {
		s.nextReset = s.step + 300 + s.rng.IntN(400)
	} else {
		s.nextReset = -1
	}
}

// startCoordinator runs the coordinator run (reset.Run, activating, or
// reset.Bootstrap) on a goroutine as s.resetting, held at some of its points
// for a few steps each: after the candidate slot exists (writes after its
// consistent point, before the baseline), inside the baseline transaction
// (after its first relation), after the baseline (before the barrier), after
// the barrier (catch-up pending) and once verified (before the activation).
func (s *sim) startCoordinator(kind string, run func(context.Context, reset.Config) (reset.Result, error)) *runningReset {
	r := &runningReset{kind: kind, step: s.step, done: make(chan resetOutcome, 1),
		holds: map[reset.Point]int{}, at: make(chan reset.Point), proceed: make(chan struct{})}
	for _, p := range []reset.Point{reset.PointSlotCreated, reset.PointStaging, reset.PointBaselined, reset.PointBarrier, reset.PointReady} {
		r.holds[p] = s.rng.IntN(4)
	}
	cfg := resetConfig(s.e.d, true)
	cfg.Reason = fmt.Sprintf("convergence simulation, step %d", s.step)
	cfg.Log = slog.New(slog.NewTextHandler(s.resetLog, nil))
	passed := map[reset.Point]bool{} // the coordinator's goroutine's own
	quit := make(chan struct{})      // the test ended (failed) while it was held
	s.t.Cleanup(func() { close(quit) })
	cfg.AfterPoint = func(p reset.Point) error {
		if r.holds[p] == 0 || passed[p] {
			return nil
		}
		passed[p] = true
		select {
		case r.at <- p:
		case <-quit:
			return errors.New("the test ended")
		}
		select {
		case <-r.proceed:
			return nil
		case <-quit:
			return errors.New("the test ended")
		}
	}
	go func() {
		res, err := run(context.Background(), cfg)
		r.done <- resetOutcome{res, err}
	}()
	s.resetting = r
	return r
}

// maintainReset notices the end of the running reset or bootstrap (waits for
// it, with wait): a reset must have activated the new generation, a bootstrap
// must have been activated by the capture worker and retired.
func (s *sim) maintainReset(wait bool) {
	r := s.resetting
	if r == nil {
		return
	}
	var o resetOutcome
	if wait {
		if r.held != "" {
			r.proceed <- struct{}{}
		}
		deadline := time.After(3 * time.Minute)
	waiting:
		for {
			select {
			case <-r.at:
				r.proceed <- struct{}{}
			case o = <-r.done:
				break waiting
			case <-deadline:
				s.t.Fatalf("the %s started at step %d did not end within 3 minutes; its log:\n%s", r.kind, r.step, s.resetLog)
			}
		}
	} else {
		if r.held == "" {
			select {
			case p := <-r.at:
				r.held, r.heldAt = p, s.step
				s.logf("%s held at %s for %d steps", r.kind, p, r.holds[p])
				s.stats[r.kind+" holds at "+string(p)]++
			default:
			}
		}
		if r.held != "" && s.step-r.heldAt >= r.holds[r.held] {
			s.logf("%s goes on after %s", r.kind, r.held)
			r.held = ""
			r.proceed <- struct{}{}
		}
		select {
		case o = <-r.done:
		default:
			return
		}
	}
	s.resetting = nil
	if r.kind == "bootstrap" {
		if o.err != nil || o.res.Phase != "retired" {
			s.t.Fatalf("the bootstrap started at step %d ended %q with %v, want retired; its log:\n%s", r.step, o.res.Phase, o.err, s.resetLog)
		}
		s.logf("bootstrap %s (started at step %d) activated and retired: app.issues is served", o.res.ResetID, r.step)
		s.issuesServed = true
		s.stats["steps taken beside a running bootstrap"] += s.step - r.step
		return
	}
	if o.err != nil || o.res.Phase != "activated" {
		s.t.Fatalf("the stream reset started at step %d ended %q with %v, want activated; its log:\n%s", r.step, o.res.Phase, o.err, s.resetLog)
	}
	s.logf("stream reset %s (started at step %d) activated", o.res.ResetID, r.step)
	s.activated = append(s.activated, o.res.ResetID)
	s.stats["stream resets activated"]++
	s.stats["steps taken beside a running stream reset"] += s.step - r.step
	if r.retire {
		s.retireAt = s.step + r.delay
	}
}

// retireReset retires the last activated reset (synchro.retire_reset: the old
// slot and the old generation's derived state go) once nothing streams the
// old slot any more: the worker leaves it when it follows the active-slot
// pointer after the activation.
func (s *sim) retireReset() {
	id := s.activated[len(s.activated)-1]
	s.retireAt = -1
	waitFor(s.t, "the worker to leave the old slot after the activation", 60*time.Second, func() (bool, error) {
		var inUse bool
		err := s.e.d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM synchro.stream_reset r
			JOIN pg_replication_slots s ON s.slot_name = r.source_slot WHERE r.reset_id = $1 AND s.active)`, id).Scan(&inUse)
		return !inUse, err
	})
	// Retirement removes the fences the baseline covered: their push fences
	// are counted first, for the final check that every applied mutation wrote
	// exactly one.
	for _, row := range rowsOf(s.t, s.e.d, `SELECT f.client_id, f.mutation_id, count(*) FROM synchro.fence f
		JOIN synchro.reset_coverage c USING (fence_id) WHERE c.reset_id = $1 AND f.mutation_id IS NOT NULL GROUP BY 1, 2`, id) {
		p := strings.SplitN(row, "|", 3)
		n, _ := strconv.Atoi(p[2])
		s.retiredFences[p[0]+"/"+p[1]] += n
	}
	removed := queryText(s.t, s.e.d, `SELECT retirement::text FROM synchro.retire_reset($1)`, id)
	s.logf("stream reset %s retired: %s", id, removed)
	s.stats["stream resets retired"]++
}

// registryChangePending reports whether a registry change, bootstrap or
// stream reset is in progress (not yet activated): registry changes and resets
// are refused meanwhile (55006). A rule change is activated by the capture
// worker in source order, so one stays pending while the worker is down.
func (s *sim) registryChangePending() bool {
	return queryText(s.t, s.e.d, `SELECT EXISTS (SELECT FROM synchro.stream_reset WHERE phase IN ('staging', 'catching_up', 'ready'))::text`) == "true"
}

// registerIssues registers app.issues, which the server has written from the
// start (it holds rows), and runs its projection bootstrap beside the steps
// (startCoordinator): until the capture worker activates it the table is not
// served; then every replica's connect answers replace (the SDK creates the
// table) and the scopes the bootstrap gave rows get a floor (their cursors are
// answered with rebuild).
func (s *sim) registerIssues() {
	s.nextRegister = -1
	rows := queryInt(s.t, s.e.d, `SELECT count(*) FROM app.issues`)
	s.e.d.Exec(s.t, `SELECT synchro.register_table('app.issues', '`+issuesRule+`')`)
	id := queryText(s.t, s.e.d, `SELECT reset_id::text FROM synchro.stream_reset WHERE kind = 'bootstrap' AND phase = 'staging'`)
	s.changes = append(s.changes, id)
	r := s.startCoordinator("bootstrap", reset.Bootstrap)
	s.logf("app.issues registered holding %d rows: bootstrap %s started (held at %v)", rows, id, r.holds)
	s.stats["populated tables registered"]++
}

// reconfigureCards moves app.cards' rule to its other owner column
// (synchro.reconfigure_table): the capture worker activates the change at its
// transaction, in source order; cards move between users' scopes, whose
// cursors from before it are answered with rebuild.
func (s *sim) reconfigureCards() {
	s.cardsColumn = map[string]string{"owner_id": "reviewer_id", "reviewer_id": "owner_id"}[s.cardsColumn]
	id := queryText(s.t, s.e.d, `SELECT synchro.reconfigure_table('app.cards', $1::jsonb)::text`, fmt.Sprintf(cardsRule, s.cardsColumn))
	s.changes = append(s.changes, id)
	s.logf("app.cards' rule changed to user:{%s} (registry change %s)", s.cardsColumn, id)
	s.stats["rule changes"]++
	s.nextReconfigure = -1
	if s.plan.duration > 0 {
		s.nextReconfigure = s.step + 300 + s.rng.IntN(400)
	}
}

// activeGeneration is the stream generation synchro.progress names.
func (s *sim) activeGeneration() string {
	return queryText(s.t, s.e.d, `SELECT stream_generation::text FROM synchro.progress`)
}

// simCursor is where a replica's scope cursor stands: its stream generation
// and the position it resumes after (commit, event and effect ordinals; ""
// for a scope without a cursor).
type simCursor struct{ generation, lsn, event, effect string }

// cursors is the replica's scopes -> where its cursor stands. The test reads
// the cursor's payload (base64url JSON ["c", generation, scope, client, epoch,
// lsn, event ordinal, effect ordinal], synchro.sign_token); the SDK never does.
func (s *sim) cursors(c *simClient) map[string]simCursor {
	rows, err := c.DB().Query(`SELECT scope, cursor FROM _synchro_scopes`)
	if err != nil {
		s.t.Fatalf("%s: reading the cursors: %v", c.name, err)
	}
	defer rows.Close()
	out := map[string]simCursor{}
	for rows.Next() {
		var scope string
		var cursor *string
		if err := rows.Scan(&scope, &cursor); err != nil {
			s.t.Fatal(err)
		}
		out[scope] = simCursor{}
		if cursor == nil {
			continue
		}
		payload, _, _ := strings.Cut(*cursor, ".")
		raw, err := base64.RawURLEncoding.DecodeString(payload)
		var parts []string
		if err == nil {
			err = json.Unmarshal(raw, &parts)
		}
		if err != nil || len(parts) != 8 || parts[0] != "c" {
			s.t.Fatalf("%s: scope %s: cursor %q is not a scope cursor (%v)", c.name, scope, *cursor, err)
		}
		out[scope] = simCursor{generation: parts[1], lsn: parts[5], event: parts[6], effect: parts[7]}
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

func (s *sim) pgScript(args ...string) {
	if _, err := pgcluster(s.t, args...); err != nil {
		s.t.Fatal(err)
	}
}

// ---- the network ----

// faultTransport is a replica's network. It records the mutation ids of every
// push it forwards and, for a faulty replica during the chaos phase, cuts
// requests: before sending, after the server processed the request (the answer
// is lost), or in the middle of the answer. It can also cancel the Sync's
// context after a given request, as an application killed mid-sync.
type faultTransport struct {
	s      *sim
	c      *simClient
	faulty bool
	rng    *rand.Rand

	cancelAt int // cancel after this many requests of the Sync (0: never)
	cancel   context.CancelFunc
	requests int

	// expect: the mutation ids of a push whose answer the SDK did not get; its
	// next push must resend exactly them (the batch in flight).
	expect []string

	// listed: the scopes the server put in rebuild in a connect or pull
	// answer of the current Sync (observe).
	listed map[string]bool
}

type errBody struct{ err error }

func (b errBody) Read([]byte) (int, error) { return 0, b.err }

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	// A worker the hook stopped comes back as soon as a replica talks to the
	// server, so the capture gate does not wait for a whole step.
	if f.s.workerUp && !f.s.pgDown {
		f.s.maintainWorker()
	}
	if f.overtakeDue(req, body) {
		if err := f.overtake(); err != nil {
			return nil, err
		}
	}
	push := req.URL.Path == "/sync/push"
	var ids []string
	if push {
		ids = f.pushIDs(body)
	}
	roll := 1.0
	if f.faulty && f.s.chaos {
		roll = f.rng.Float64()
	}
	if roll < 0.05 {
		f.s.stats["http: cut before sending"]++
		f.lost(ids)
		return nil, errors.New("injected fault: connection reset before the request was sent")
	}
	if push {
		f.sending(ids)
	}
	f.requests++
	res, err := http.DefaultTransport.RoundTrip(req)
	if f.cancelAt > 0 && f.requests >= f.cancelAt && f.cancel != nil {
		f.cancel()
		f.cancelAt, f.cancel = 0, nil
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		f.s.stats["sync: context cancelled after a request"]++
		f.lost(ids)
		return nil, context.Canceled
	}
	if err != nil {
		f.lost(ids)
		return nil, err
	}
	if err := f.observe(req, res); err != nil {
		f.lost(ids)
		return nil, err
	}
	switch {
	case roll < 0.10:
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		f.s.stats["http: answer lost after the server processed the request"]++
		f.lost(ids)
		return nil, errors.New("injected fault: connection lost after the server processed the request")
	case roll < 0.13:
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		res.Body = io.NopCloser(io.MultiReader(bytes.NewReader(raw[:len(raw)/2]),
			errBody{errors.New("injected fault: connection lost while reading the answer")}))
		f.s.stats["http: answer cut in the middle"]++
		f.lost(ids)
		return res, nil
	}
	if push && res.StatusCode == http.StatusOK {
		f.expect = nil
	}
	return res, nil
}

// pushIDs are the mutation ids of a push body, in order.
func (f *faultTransport) pushIDs(body []byte) []string {
	var req struct {
		ClientID  string `json:"client_id"`
		Mutations []struct {
			MutationID string `json:"mutation_id"`
		} `json:"mutations"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		f.s.t.Fatalf("%s: push body is not JSON: %v", f.c.name, err)
	}
	if req.ClientID != f.c.name {
		f.s.t.Fatalf("%s: push as client %q", f.c.name, req.ClientID)
	}
	ids := make([]string, len(req.Mutations))
	for i, m := range req.Mutations {
		ids[i] = m.MutationID
	}
	return ids
}

// sending checks a push about to go out: after a lost answer it must be the same
// batch, and every mutation in it must have been queued.
func (f *faultTransport) sending(ids []string) {
	if f.expect != nil && !slices.Equal(ids, f.expect) {
		f.s.t.Fatalf("%s: after a push whose answer was lost, the next push carries mutations %v instead of the batch in flight %v (same mutation ids required)",
			f.c.name, ids, f.expect)
	}
	for _, id := range ids {
		if _, ok := f.c.queued[id]; !ok {
			f.s.t.Fatalf("%s: pushes mutation %s, which was never seen in its queue", f.c.name, id)
		}
		f.c.sent[id] = true
	}
}

func (f *faultTransport) lost(ids []string) {
	if ids != nil {
		f.expect = ids
	}
}

// ---- replicas ----

func (s *sim) pickClient() *simClient { return s.clients[s.rng.IntN(len(s.clients))] }

// sync runs one Sync of c. During the chaos phase a Sync may fail, but only
// with a retryable error or because its context ended; a scope that had a
// cursor must never need a rebuild (that means a pull delivered something other
// than the server's contents and the checksum caught it).
func (s *sim) sync(c *simClient) {
	if c.offline() {
		s.stats["syncs skipped: laggard offline"]++
		return
	}
	timeout := 20 * time.Second
	if !s.workerUp || s.pgDown || s.resetting != nil {
		// Pulls answer 503 (capture_pending, or not_ready with Retry-After: 1
		// while a reset runs) until capture is back: an application gives up
		// soon.
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c.ft.faulty && s.chaos && s.rng.IntN(100) < 6 {
		c.ft.cancelAt, c.ft.cancel = 1+s.rng.IntN(6), cancel
	}
	c.ft.requests, c.ft.listed = 0, map[string]bool{}
	voidedBefore := s.stats["cursors behind the retention horizon rebuilt"]
	before := s.syncedScopes(c)
	cursors := s.cursors(c)
	epochs, epochsKnown := s.scopeEpochs(c)
	start := time.Now()
	rep, err := c.SyncReport(ctx)
	c.ft.cancelAt, c.ft.cancel = 0, nil
	s.logf("%s: sync pushed %d, rejected %d, retried %d, pulled %d, rebuilt %v, pending %d (%s) err=%v",
		c.name, rep.Pushed, rep.Rejected, rep.Retried, rep.Pulled, rep.Rebuilt, rep.Pending, time.Since(start).Round(time.Millisecond), err)
	s.stats["syncs"]++
	s.stats["changes pulled"] += rep.Pulled
	if err != nil {
		s.stats["syncs failed (faults)"]++
		var pe *client.Error
		switch {
		case ctx.Err() != nil:
		case errors.As(err, &pe) && pe.Retryable:
		default:
			s.t.Fatalf("%s: sync failed with a non-retryable error although its context was live: %v", c.name, err)
		}
	}
	after := s.syncedScopes(c)
	// A scope the server saw removed from the client's set and assigned again
	// (also by a request whose answer the client never got) has a new
	// assignment epoch, and its old cursor must not resume: a rebuild is due.
	reassigned := func(scope string) bool {
		now, ok := s.scopeEpochs(c)
		if ok && epochsKnown && now[scope] != epochs[scope] {
			s.stats["cursors dropped after re-assignment"]++
			return true
		}
		return false
	}
	for _, scope := range rep.Rebuilt {
		if before[scope] && !reassigned(scope) && !s.cursorVoided(c, cursors, scope) {
			s.healing = append(s.healing, fmt.Sprintf("step %d %s %s", s.step, c.name, scope))
			s.t.Fatalf("%s: scope %s had a cursor before the sync and was rebuilt: the pull delivered changes whose checksum does not match the server's (lost, duplicated or wrong changes)", c.name, scope)
		}
	}
	for scope, synced := range after {
		if before[scope] && !synced && !reassigned(scope) && !s.cursorVoided(c, cursors, scope) {
			s.t.Fatalf("%s: scope %s had a cursor before the sync and lost it: the pull's checksum did not match the server's (lost, duplicated or wrong changes)", c.name, scope)
		}
	}
	if err == nil {
		s.horizonRebuilt(c, s.stats["cursors behind the retention horizon rebuilt"]-voidedBefore)
		s.goOffline(c)
	}
}

// cursorVoided reports whether the cursor scope had (cursors, from s.cursors)
// can no longer be resumed by the server's design, so the scope loses its
// cursor and is rebuilt: it is bound to a stream generation that is not the
// active one (a stream reset was activated since), it stands before the
// scope's floor (a registry change moved rows into or out of the scope there),
// or the server put the scope in rebuild in this Sync (c.ft.listed, not a
// checksum mismatch) and the cursor is behind the retention horizon.
func (s *sim) cursorVoided(c *simClient, cursors map[string]simCursor, scope string) bool {
	cur := cursors[scope]
	switch {
	case cur.generation == "":
		return false
	case cur.generation != s.activeGeneration():
		s.stats["cursors of an earlier stream generation rebuilt"]++
		return true
	case queryText(s.t, s.e.d, `SELECT EXISTS (SELECT FROM synchro.scope_floor WHERE stream_generation = $1::uuid AND scope = $2
		AND floor_lsn > $3::pg_lsn)::text`, cur.generation, scope, cur.lsn) == "true":
		s.stats["cursors before a registry change's scope floor rebuilt"]++
		return true
	case c.ft.listed[scope] && s.behindHorizon(cur):
		s.stats["cursors behind the retention horizon rebuilt"]++
		return true
	}
	return false
}

// scopeEpochs is the server's assignment epoch of each scope of c's set
// (synchro.client.scope_epoch); false when the server cannot be asked.
func (s *sim) scopeEpochs(c *simClient) (map[string]string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := s.e.d.Pool.Query(ctx, `SELECT e.key, e.value::text FROM synchro.client k, jsonb_each(k.scope_epoch) e WHERE k.client_id = $1`, c.name)
	if err != nil {
		return nil, false
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var scope, epoch string
		if err := rows.Scan(&scope, &epoch); err != nil {
			return nil, false
		}
		out[scope] = epoch
	}
	return out, rows.Err() == nil
}

// syncedScopes is the replica's scopes -> has a cursor.
func (s *sim) syncedScopes(c *simClient) map[string]bool {
	scopes, err := c.Scopes(context.Background())
	if err != nil {
		s.t.Fatalf("%s: scopes: %v", c.name, err)
	}
	out := map[string]bool{}
	for _, sc := range scopes {
		out[sc.ID] = sc.Synced
	}
	return out
}

// snapshotQueue records every mutation now queued by c.
func (s *sim) snapshotQueue(c *simClient) {
	rows, err := c.DB().Query(`SELECT mutation_id, tbl, pk, op, base_version IS NOT NULL FROM _synchro_queue`)
	if err != nil {
		s.t.Fatalf("%s: reading the queue: %v", c.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var q queuedMutation
		if err := rows.Scan(&id, &q.tbl, &q.pk, &q.op, &q.base); err != nil {
			s.t.Fatal(err)
		}
		c.queued[id] = q
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
}

// localIDs are the ids of a replica's table, as text, in order.
func (s *sim) localIDs(c *simClient, table string) []string {
	rows, err := c.DB().Query(`SELECT CAST(id AS TEXT) FROM "` + table + `" ORDER BY id`)
	if err != nil {
		s.t.Fatalf("%s: %v", c.name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// pickRow picks an id, half of the time among the first three (hot rows that
// several replicas and the server edit, hence conflicts).
func (s *sim) pickRow(ids []string) (string, bool) {
	if len(ids) == 0 {
		return "", false
	}
	if len(ids) > 3 && s.rng.IntN(2) == 0 {
		return ids[s.rng.IntN(3)], true
	}
	return ids[s.rng.IntN(len(ids))], true
}

func (s *sim) local(c *simClient, what, query string, args ...any) {
	if _, err := c.DB().Exec(query, args...); err != nil {
		s.t.Fatalf("%s: local write %s: %s: %v", c.name, what, query, err)
	}
	s.logf("%s: local %s %v", c.name, what, args)
	s.stats["local writes"]++
}

// clientWrites makes 1 to 3 local changes on c with plain SQL, as the
// application would: inserts, updates, deletes and re-keys on every table,
// including writes the server must refuse (other users' rows, read-only
// templates, constraint violations, notes without members, missing projects).
func (s *sim) clientWrites(c *simClient) {
	for range 1 + s.rng.IntN(3) {
		s.clientWrite(c)
	}
	s.snapshotQueue(c)
}

func (s *sim) clientWrite(c *simClient) {
	title := fmt.Sprintf("%s@%d", c.name, s.step)
	switch r := s.rng.IntN(100); {
	case r < 12: // insert a doc: mostly its user's, sometimes another user's or invalid
		owner := c.user
		if s.rng.IntN(5) == 0 {
			owner = s.anyUser()
		}
		n := s.rng.IntN(100)
		if s.rng.IntN(12) == 0 {
			n = -1 // CHECK (n >= 0): validation_failed
		}
		s.local(c, "insert doc", `INSERT INTO docs (id, owner_id, title, n) VALUES (?, ?, ?, ?)`, s.newID("d"), owner, title, n)
	case r < 30: // update a doc; sometimes hand it to another user, or set the other columns
		id, ok := s.pickRow(s.localIDs(c, "docs"))
		if !ok {
			return
		}
		switch s.rng.IntN(8) {
		case 0:
			s.local(c, "transfer doc", `UPDATE docs SET owner_id = ? WHERE id = ?`, s.anyUser(), id)
		case 1:
			s.local(c, "update doc columns", `UPDATE docs SET data = ?, at = ?, meta = ? WHERE id = ?`,
				[]byte{byte(s.step), 0xff, byte(s.rng.IntN(256))}, fmt.Sprintf("2026-03-%02dT10:00:%02dZ", 1+s.rng.IntN(28), s.rng.IntN(60)),
				fmt.Sprintf(`{"step":%d,"tags":["a","b"]}`, s.step), id)
		case 2: // two edits merged into one queued mutation
			s.local(c, "update doc", `UPDATE docs SET title = ? WHERE id = ?`, title+"a", id)
			s.local(c, "update doc again", `UPDATE docs SET n = ? WHERE id = ?`, s.rng.IntN(100), id)
		default:
			s.local(c, "update doc", `UPDATE docs SET title = ?, n = ? WHERE id = ?`, title, s.rng.IntN(100), id)
		}
	case r < 36:
		if id, ok := s.pickRow(s.localIDs(c, "docs")); ok {
			s.local(c, "delete doc", `DELETE FROM docs WHERE id = ?`, id)
		}
	case r < 38: // a new primary key: a delete and an insert
		if id, ok := s.pickRow(s.localIDs(c, "docs")); ok {
			s.local(c, "re-key doc", `UPDATE docs SET id = ? WHERE id = ?`, s.newID("d"), id)
		}
	case r < 41: // insert a row the server has but the replica does not (yet): an upsert without base_version
		ids := s.serverIDs(`SELECT id FROM app.docs ORDER BY id`)
		have := s.localIDs(c, "docs")
		if id, ok := s.pickRow(ids); ok && !slices.Contains(have, id) {
			s.local(c, "insert existing doc", `INSERT INTO docs (id, owner_id, title, n) VALUES (?, ?, ?, ?)`, id, c.user, title, 1)
		}
	case r < 50: // insert a task: into a project of the user, another's, or a missing one
		projects := s.serverIDs(`SELECT id FROM app.projects WHERE owner_id = $1 ORDER BY id`, c.user)
		if len(projects) == 0 || s.rng.IntN(6) == 0 {
			projects = s.serverIDs(`SELECT id FROM app.projects ORDER BY id`)
		}
		project := "p-missing"
		if len(projects) > 0 && s.rng.IntN(15) != 0 {
			project = projects[s.rng.IntN(len(projects))]
		}
		s.local(c, "insert task", `INSERT INTO tasks (id, project_id, title) VALUES (?, ?, ?)`, s.newNum(), project, title)
	case r < 60:
		id, ok := s.pickRow(s.localIDs(c, "tasks"))
		if !ok {
			return
		}
		if s.rng.IntN(5) == 0 {
			projects := s.serverIDs(`SELECT id FROM app.projects ORDER BY id`)
			s.local(c, "move task", `UPDATE tasks SET project_id = ? WHERE id = ?`, projects[s.rng.IntN(len(projects))], id)
		} else {
			s.local(c, "update task", `UPDATE tasks SET title = ? WHERE id = ?`, title, id)
		}
	case r < 65:
		if id, ok := s.pickRow(s.localIDs(c, "tasks")); ok {
			s.local(c, "delete task", `DELETE FROM tasks WHERE id = ?`, id)
		}
	case r < 75:
		if id, ok := s.pickRow(s.localIDs(c, "notes")); ok {
			s.local(c, "update note", `UPDATE notes SET title = ? WHERE id = ?`, title, id)
		}
	case r < 77: // a note with members cannot go (foreign key): validation_failed
		if id, ok := s.pickRow(s.localIDs(c, "notes")); ok {
			s.local(c, "delete note", `DELETE FROM notes WHERE id = ?`, id)
		}
	case r < 79: // a note without members is in no scope: policy_rejected
		s.local(c, "insert note", `INSERT INTO notes (id, title) VALUES (?, ?)`, s.newID("n"), title)
	case r < 81: // read-only: policy_rejected
		if id, ok := s.pickRow(s.localIDs(c, "templates")); ok {
			s.local(c, "update template", `UPDATE templates SET name = ? WHERE id = ?`, title, id)
		}
	case r < 88: // insert a report, mostly for a team of the user
		teams := s.serverIDs(`SELECT DISTINCT team FROM app.team_members WHERE user_id = $1 ORDER BY 1`, c.user)
		if len(teams) == 0 || s.rng.IntN(5) == 0 {
			teams = simTeams
		}
		s.local(c, "insert report", `INSERT INTO reports (id, team, title) VALUES (?, ?, ?)`, s.newID("r"), teams[s.rng.IntN(len(teams))], title)
	case r < 96:
		id, ok := s.pickRow(s.localIDs(c, "reports"))
		if !ok {
			return
		}
		if s.rng.IntN(4) == 0 {
			s.local(c, "move report to a team", `UPDATE reports SET team = ? WHERE id = ?`, simTeams[s.rng.IntN(len(simTeams))], id)
		} else {
			s.local(c, "update report", `UPDATE reports SET title = ? WHERE id = ?`, title, id)
		}
	default:
		if id, ok := s.pickRow(s.localIDs(c, "reports")); ok {
			s.local(c, "delete report", `DELETE FROM reports WHERE id = ?`, id)
		}
	}
}

// ---- the server ----

func (s *sim) newID(prefix string) string {
	s.nextID++
	return fmt.Sprintf("%s%05d", prefix, s.nextID)
}

func (s *sim) newNum() int {
	s.nextID++
	return s.nextID
}

func (s *sim) anyUser() string {
	all := append(slices.Clone(simUsers), simOrphan)
	return all[s.rng.IntN(len(all))]
}

func (s *sim) someUsers(n int) []string {
	all := append(slices.Clone(simUsers), simOrphan)
	s.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:n]
}

func (s *sim) someTeams(n int) []string {
	all := slices.Clone(simTeams)
	s.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:n]
}

// lit quotes a SQL string literal.
func lit(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

// serverIDs runs a query of one text column on the server.
func (s *sim) serverIDs(query string, args ...any) []string {
	rows, err := s.e.d.Pool.Query(context.Background(), query, args...)
	if err != nil {
		s.t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v any
		if err := rows.Scan(&v); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, fmt.Sprint(v))
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// serverWrites commits one source transaction of 1 to 3 direct SQL writes to
// the synced tables and their dependencies: row changes, ownership transfers
// (a doc, a project with all its tasks, a report to another team) and
// membership changes (note members, team members).
func (s *sim) serverWrites() {
	var stmts []string
	gone := map[string]bool{}
	for range 1 + s.rng.IntN(3) {
		if q := s.serverWrite(gone); q != "" {
			stmts = append(stmts, q)
		}
	}
	if len(stmts) == 0 {
		return
	}
	sql := strings.Join(stmts, ";\n")
	s.logf("server: %s", strings.ReplaceAll(sql, "\n", " "))
	s.e.d.Exec(s.t, sql)
	s.stats["server transactions"]++
}

func (s *sim) serverWrite(gone map[string]bool) string {
	if s.rng.IntN(100) < 15 {
		return s.registryTableWrite()
	}
	pick := func(query string, args ...any) (string, bool) { return s.pickRow(s.serverIDs(query, args...)) }
	title := fmt.Sprintf("srv@%d", s.step)
	switch r := s.rng.IntN(100); {
	case r < 8:
		return fmt.Sprintf("INSERT INTO app.docs (id, owner_id, title, n) VALUES (%s, %s, %s, %d)", lit(s.newID("d")), lit(s.anyUser()), lit(title), s.rng.IntN(100))
	case r < 18:
		if id, ok := pick(`SELECT id FROM app.docs ORDER BY id`); ok {
			return fmt.Sprintf("UPDATE app.docs SET title = %s, n = %d WHERE id = %s", lit(title), s.rng.IntN(100), lit(id))
		}
	case r < 26:
		if id, ok := pick(`SELECT id FROM app.docs ORDER BY id`); ok {
			s.stats["ownership transfers"]++
			return fmt.Sprintf("UPDATE app.docs SET owner_id = %s WHERE id = %s", lit(s.anyUser()), lit(id))
		}
	case r < 30:
		if id, ok := pick(`SELECT id FROM app.docs ORDER BY id`); ok {
			return fmt.Sprintf("DELETE FROM app.docs WHERE id = %s", lit(id))
		}
	case r < 32:
		return fmt.Sprintf("INSERT INTO app.projects VALUES (%s, %s)", lit(s.newID("p")), lit(s.anyUser()))
	case r < 38:
		if id, ok := pick(`SELECT id FROM app.projects ORDER BY id`); ok {
			s.stats["ownership transfers"]++
			return fmt.Sprintf("UPDATE app.projects SET owner_id = %s WHERE id = %s", lit(s.anyUser()), lit(id))
		}
	case r < 43:
		if p, ok := pick(`SELECT id FROM app.projects ORDER BY id`); ok {
			return fmt.Sprintf("INSERT INTO app.tasks VALUES (%d, %s, %s)", s.newNum(), lit(p), lit(title))
		}
	case r < 48:
		if id, ok := pick(`SELECT id FROM app.tasks ORDER BY id`); ok {
			if s.rng.IntN(3) == 0 {
				p, _ := pick(`SELECT id FROM app.projects ORDER BY id`)
				s.stats["ownership transfers"]++
				return fmt.Sprintf("UPDATE app.tasks SET project_id = %s WHERE id = %s", lit(p), id)
			}
			return fmt.Sprintf("UPDATE app.tasks SET title = %s WHERE id = %s", lit(title), id)
		}
	case r < 51:
		if id, ok := pick(`SELECT id FROM app.tasks ORDER BY id`); ok {
			return fmt.Sprintf("DELETE FROM app.tasks WHERE id = %s", id)
		}
	case r < 55:
		id := s.newID("n")
		q := fmt.Sprintf("INSERT INTO app.notes VALUES (%s, %s)", lit(id), lit(title))
		for _, u := range s.someUsers(1 + s.rng.IntN(2)) {
			q += fmt.Sprintf(";\nINSERT INTO app.note_members (note_id, user_id) VALUES (%s, %s)", lit(id), lit(u))
		}
		return q
	case r < 63: // membership change: share a note with one more user
		id, ok := pick(`SELECT id FROM app.notes ORDER BY id`)
		if ok && !gone[id] {
			u := s.anyUser()
			s.stats["membership changes"]++
			if s.rng.IntN(3) == 0 { // the same member twice: the scope once
				s.stats["duplicate memberships"]++
				return fmt.Sprintf("INSERT INTO app.note_members (note_id, user_id) VALUES (%s, %s)", lit(id), lit(u))
			}
			return fmt.Sprintf("INSERT INTO app.note_members (note_id, user_id) SELECT %s, %s WHERE NOT EXISTS (SELECT FROM app.note_members WHERE note_id = %s AND user_id = %s)",
				lit(id), lit(u), lit(id), lit(u))
		}
	case r < 70: // membership change: unshare
		if id, ok := pick(`SELECT id FROM app.note_members ORDER BY id`); ok {
			s.stats["membership changes"]++
			return fmt.Sprintf("DELETE FROM app.note_members WHERE id = %s", id)
		}
	case r < 74:
		if id, ok := pick(`SELECT id FROM app.notes ORDER BY id`); ok {
			return fmt.Sprintf("UPDATE app.notes SET title = %s WHERE id = %s", lit(title), lit(id))
		}
	case r < 76:
		if id, ok := pick(`SELECT id FROM app.notes ORDER BY id`); ok {
			gone[id] = true
			return fmt.Sprintf("DELETE FROM app.note_members WHERE note_id = %s;\nDELETE FROM app.notes WHERE id = %s", lit(id), lit(id))
		}
	case r < 81: // membership change of the sql rule's dependency
		u, team := s.anyUser(), simTeams[s.rng.IntN(len(simTeams))]
		s.stats["membership changes"]++
		if s.rng.IntN(3) == 0 { // the same member twice: the scope once
			s.stats["duplicate memberships"]++
			return fmt.Sprintf("INSERT INTO app.team_members (team, user_id) VALUES (%s, %s)", lit(team), lit(u))
		}
		return fmt.Sprintf("INSERT INTO app.team_members (team, user_id) SELECT %s, %s WHERE NOT EXISTS (SELECT FROM app.team_members WHERE team = %s AND user_id = %s)",
			lit(team), lit(u), lit(team), lit(u))
	case r < 85:
		if id, ok := pick(`SELECT id FROM app.team_members ORDER BY id`); ok {
			s.stats["membership changes"]++
			return fmt.Sprintf("DELETE FROM app.team_members WHERE id = %s", id)
		}
	case r < 88:
		return fmt.Sprintf("INSERT INTO app.reports VALUES (%s, %s, %s)", lit(s.newID("r")), lit(simTeams[s.rng.IntN(len(simTeams))]), lit(title))
	case r < 94:
		if id, ok := pick(`SELECT id FROM app.reports ORDER BY id`); ok {
			if s.rng.IntN(2) == 0 {
				s.stats["ownership transfers"]++
				return fmt.Sprintf("UPDATE app.reports SET team = %s WHERE id = %s", lit(simTeams[s.rng.IntN(len(simTeams))]), lit(id))
			}
			return fmt.Sprintf("UPDATE app.reports SET title = %s WHERE id = %s", lit(title), lit(id))
		}
	case r < 96:
		if id, ok := pick(`SELECT id FROM app.reports ORDER BY id`); ok {
			return fmt.Sprintf("DELETE FROM app.reports WHERE id = %s", lit(id))
		}
	default:
		switch s.rng.IntN(3) {
		case 0:
			return fmt.Sprintf("INSERT INTO app.templates VALUES (%d, %s)", s.newNum(), lit(title))
		case 1:
			if id, ok := pick(`SELECT id FROM app.templates ORDER BY id`); ok {
				return fmt.Sprintf("UPDATE app.templates SET name = %s WHERE id = %s", lit(title), id)
			}
		default:
			if id, ok := pick(`SELECT id FROM app.templates ORDER BY id`); ok {
				return fmt.Sprintf("DELETE FROM app.templates WHERE id = %s", id)
			}
		}
	}
	return ""
}

// registryTableWrite is a write of app.cards (whose rule changes in the run:
// an owner or reviewer change moves a card between scopes under one rule and
// not the other) or app.issues (written before, during and after its
// registration and bootstrap).
func (s *sim) registryTableWrite() string {
	pick := func(query string) (string, bool) { return s.pickRow(s.serverIDs(query)) }
	title := fmt.Sprintf("srv@%d", s.step)
	switch r := s.rng.IntN(10); {
	case r == 0:
		return fmt.Sprintf("INSERT INTO app.cards VALUES (%s, %s, %s, %s)", lit(s.newID("c")), lit(s.anyUser()), lit(s.anyUser()), lit(title))
	case r < 3:
		if id, ok := pick(`SELECT id FROM app.cards ORDER BY id`); ok {
			column := []string{"owner_id", "reviewer_id"}[s.rng.IntN(2)]
			s.stats["ownership transfers"]++
			return fmt.Sprintf("UPDATE app.cards SET %s = %s, title = %s WHERE id = %s", column, lit(s.anyUser()), lit(title), lit(id))
		}
	case r == 3:
		if id, ok := pick(`SELECT id FROM app.cards ORDER BY id`); ok {
			return fmt.Sprintf("DELETE FROM app.cards WHERE id = %s", lit(id))
		}
	case r < 6:
		return fmt.Sprintf("INSERT INTO app.issues VALUES (%s, %s, %s, %d)", lit(s.newID("i")), lit(s.anyUser()), lit(title), s.rng.IntN(100))
	case r < 9:
		if id, ok := pick(`SELECT id FROM app.issues ORDER BY id`); ok {
			if s.rng.IntN(3) == 0 {
				s.stats["ownership transfers"]++
				return fmt.Sprintf("UPDATE app.issues SET owner_id = %s WHERE id = %s", lit(s.anyUser()), lit(id))
			}
			return fmt.Sprintf("UPDATE app.issues SET title = %s, n = n + 1 WHERE id = %s", lit(title), lit(id))
		}
	default:
		if id, ok := pick(`SELECT id FROM app.issues ORDER BY id`); ok {
			return fmt.Sprintf("DELETE FROM app.issues WHERE id = %s", lit(id))
		}
	}
	return ""
}

// assignmentChange changes which scopes users are assigned: rows of the
// assignment function's table (another user's scope, the shared templates, an
// empty shared scope), a new shared scope, or a switch between the custom
// function and the default assignment.
func (s *sim) assignmentChange() {
	var q string
	switch s.rng.IntN(8) {
	case 0, 1, 2:
		u := simUsers[s.rng.IntN(len(simUsers))]
		scopes := []string{"templates_public", "user:" + s.anyUser(), "news_1", "news_2"}
		sc := scopes[s.rng.IntN(len(scopes))]
		q = fmt.Sprintf("INSERT INTO app.extra_scopes VALUES (%s, %s) ON CONFLICT DO NOTHING", lit(u), lit(sc))
	case 3, 4, 5:
		rows := s.serverIDs(`SELECT user_id || '|' || scope FROM app.extra_scopes ORDER BY 1`)
		if len(rows) == 0 {
			return
		}
		parts := strings.SplitN(rows[s.rng.IntN(len(rows))], "|", 2)
		q = fmt.Sprintf("DELETE FROM app.extra_scopes WHERE user_id = %s AND scope = %s", lit(parts[0]), lit(parts[1]))
	case 6:
		q = fmt.Sprintf("SELECT synchro.register_shared_scope('news_%d')", 1+s.rng.IntN(3))
	default:
		if s.customAssign {
			q = `SELECT synchro.set_scope_assignment(NULL)`
		} else {
			q = `SELECT synchro.set_scope_assignment('app.scopes_for(text)')`
		}
		s.customAssign = !s.customAssign
	}
	s.logf("assignment: %s", q)
	s.e.d.Exec(s.t, q)
	s.stats["scope assignment changes"]++
}

// ---- the end ----

// finish stops the faults, lets every replica settle, and checks convergence,
// the mutation accounting and the ledgers.
func (s *sim) finish() {
	t := s.t
	s.final = true
	s.chaos = false
	s.maintainReset(true)
	if s.retireAt >= 0 {
		s.retireReset()
	}
	s.hook.arm("", 0)
	if s.workerUp {
		if ok, _ := workerExited(s.e.w); ok {
			s.workerUp = false
		}
	}
	if !s.workerUp {
		s.startWorker()
	}
	waitMaterialized(t, s.e.d)
	settleStart := time.Now()
	quiet := false
	for round := 0; round < 25 && !quiet; round++ {
		quiet = true
		for _, c := range s.clients {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			before := s.syncedScopes(c)
			cursors := s.cursors(c)
			c.ft.listed = map[string]bool{}
			rep, err := c.SyncReport(ctx)
			cancel()
			if err != nil {
				t.Fatalf("%s: sync after the faults stopped (round %d): %v", c.name, round, err)
			}
			for _, scope := range rep.Rebuilt {
				if before[scope] && !s.cursorVoided(c, cursors, scope) {
					t.Fatalf("%s: scope %s had a cursor and was rebuilt while settling: a pull's checksum did not match the server's", c.name, scope)
				}
			}
			quiet = quiet && rep.Pending == 0 && rep.Pushed == 0 && rep.Rejected == 0 && rep.Retried == 0 && rep.Pulled == 0 && len(rep.Rebuilt) == 0
		}
		waitMaterialized(t, s.e.d)
	}
	if !quiet {
		t.Fatal("the replicas did not settle within 25 sync rounds after the faults stopped (something is pushed, pulled or rebuilt in every round)")
	}
	t.Logf("settled in %s", time.Since(settleStart).Round(time.Millisecond))
	s.requirePruned()

	s.requireLedgers()
	outcomes := map[string]int{}
	for _, c := range s.clients {
		s.requireMutations(c, outcomes)
	}
	for _, c := range s.clients {
		s.requireConverged(c)
	}
	s.report(outcomes)
}

// coveredByBaseline is true for a fence f that the baseline of the stream
// reset which started the active generation (p, synchro.progress) covers
// (retirement removes the fences it covered with their coverage records).
const coveredByBaseline = `EXISTS (SELECT FROM synchro.reset_coverage c JOIN synchro.stream_reset r USING (reset_id)
	WHERE r.target_generation = p.stream_generation AND c.fence_id = f.fence_id)`

// requireLedgers: every source transaction materialized once, every write's
// fence reconciled with one event (or covered by the baseline of the stream
// reset that started the active generation), no effect twice, digests and
// versions consistent. After a reset the old generation's state stays beside
// the active one's until retirement: the checks of what is current look at
// the active generation (synchro.progress) only.
func (s *sim) requireLedgers() {
	t, d := s.t, s.e.d
	s.requireResets()
	checks := []struct{ what, query string }{
		{"duplicate effects in the effect ledger (stream_generation|scope|commit_lsn|event_ordinal|table_id|key|op|version|count)", `
			SELECT stream_generation, scope, commit_lsn, event_ordinal, table_id, key, op, coalesce(version, ''), count(*)
			FROM synchro.effect GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 HAVING count(*) > 1 LIMIT 20`},
		{"events recorded twice in the event ledger (stream_generation|commit_lsn|event_ordinal|count)", `
			SELECT stream_generation, commit_lsn, event_ordinal, count(*)
			FROM synchro.event_ledger GROUP BY 1, 2, 3 HAVING count(*) > 1 LIMIT 20`},
		// Over every generation: an old stream and a reset's stage never
		// materialize the same write (the old stream is blocked from the
		// reset's start, before its candidate slot exists).
		{"fences reconciled with more than one event: a write materialized twice (fence_id|count)", `
			SELECT fence_id, count(*) FROM synchro.event_ledger GROUP BY 1 HAVING count(*) > 1 LIMIT 20`},
		{"fences neither materialized in the active generation nor covered by its baseline: writes lost by capture (fence_id|op|key|client_id|mutation_id)", `
			SELECT f.fence_id, f.op, f.key, f.client_id, f.mutation_id FROM synchro.fence f, synchro.progress p
			WHERE NOT EXISTS (SELECT FROM synchro.event_ledger l WHERE l.fence_id = f.fence_id AND l.stream_generation = p.stream_generation)
			  AND NOT ` + coveredByBaseline + ` LIMIT 20`},
		{"fences both covered by the active generation's baseline and materialized in it: a write applied twice (fence_id|op|key)", `
			SELECT f.fence_id, f.op, f.key FROM synchro.fence f, synchro.progress p
			WHERE EXISTS (SELECT FROM synchro.event_ledger l WHERE l.fence_id = f.fence_id AND l.stream_generation = p.stream_generation)
			  AND EXISTS (SELECT FROM synchro.reset_coverage c JOIN synchro.stream_reset r USING (reset_id)
			              WHERE c.fence_id = f.fence_id AND r.target_generation = p.stream_generation) LIMIT 20`},
		{"source transactions in the transaction ledger more than once (xid|count)", `
			SELECT xid, count(*) FROM synchro.txn_ledger GROUP BY 1 HAVING count(*) > 1 LIMIT 20`},
		{"committed source transactions (by the xid of their fences) neither in the active generation's transaction ledger nor covered by its baseline (xid)", `
			SELECT DISTINCT (f.xid::text::numeric % 4294967296)::bigint FROM synchro.fence f, synchro.progress p
			WHERE NOT EXISTS (SELECT FROM synchro.txn_ledger l WHERE l.stream_generation = p.stream_generation
			                  AND l.xid = (f.xid::text::numeric % 4294967296)::bigint)
			  AND NOT ` + coveredByBaseline + ` LIMIT 20`},
		{"mutations applied more than once (client_id|mutation_id|fences)", `
			SELECT client_id, mutation_id, count(*) FROM synchro.fence WHERE mutation_id IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1 LIMIT 20`},
		{"synced rows whose materialized version is not the live row's last version (table_id|key|live|materialized)", `
			SELECT t.table_id, h.key, h.version, v.version
			FROM synchro.row_head h
			JOIN synchro.synced_table t ON t.relation_id = h.relation_id
			CROSS JOIN synchro.progress p
			LEFT JOIN LATERAL (SELECT v.version FROM synchro.row_version v WHERE v.table_id = t.table_id AND v.key = h.key
			                   AND v.stream_generation = p.stream_generation
			                   ORDER BY v.commit_lsn DESC LIMIT 1) v ON true
			WHERE v.version IS DISTINCT FROM h.version
			  -- A row whose last write deleted it (its fence left no tuple) has no
			  -- version left once the retention horizon passed the deletion.
			  AND NOT (v.version IS NULL AND h.fence_ctid IS NULL) LIMIT 20`},
		{"stream generations in the transaction ledger other than the active one and the old generations of activated (not retired) resets: a restart of the stream from scratch (stream_generation)", `
			SELECT DISTINCT l.stream_generation FROM synchro.txn_ledger l, synchro.progress p
			WHERE l.stream_generation <> p.stream_generation
			  AND NOT EXISTS (SELECT FROM synchro.stream_reset r WHERE r.source_generation = l.stream_generation AND r.phase = 'activated')`},
		{"retired generations with state left (stream_generation)", `
			SELECT r.source_generation FROM synchro.stream_reset r WHERE r.kind = 'reset' AND r.phase = 'retired' AND (
			    EXISTS (SELECT FROM synchro.row_version v WHERE v.stream_generation = r.source_generation)
			 OR EXISTS (SELECT FROM synchro.membership m WHERE m.stream_generation = r.source_generation)
			 OR EXISTS (SELECT FROM synchro.txn_ledger l WHERE l.stream_generation = r.source_generation)
			 OR EXISTS (SELECT FROM pg_replication_slots s WHERE s.slot_name = r.source_slot))`},
	}
	for _, c := range checks {
		if bad := rowsOf(t, d, c.query); len(bad) > 0 {
			t.Fatalf("%s: %v", c.what, bad)
		}
	}
	requireDigests(t, d)
	requireEffectVersions(t, d)
}

// requireResets: the resets and registry changes the simulation made are the
// database's (each activated, or retired, no other), and the active
// generation and slot are those of the last reset.
func (s *sim) requireResets() {
	t, d := s.t, s.e.d
	for kind, made := range map[string][]string{"bootstrap": s.changes, "reset": s.activated} {
		got := rowsOf(t, d, `SELECT reset_id::text, phase FROM synchro.stream_reset WHERE kind = $1 ORDER BY started_at`, kind)
		if len(got) != len(made) {
			t.Fatalf("%ss in the database %v, the simulation made %v", kind, got, made)
		}
		for i, id := range made {
			if p := strings.SplitN(got[i], "|", 2); p[0] != id || p[1] != "activated" && p[1] != "retired" {
				t.Fatalf("%s %d is %s, want %s activated or retired", kind, i, got[i], id)
			}
		}
	}
	if len(s.activated) == 0 {
		return
	}
	last := s.activated[len(s.activated)-1]
	if got := queryText(t, d, `SELECT (p.stream_generation = r.target_generation) || ' ' || (p.slot_name = r.candidate_slot)
		FROM synchro.progress p, synchro.stream_reset r WHERE r.reset_id = $1`, last); got != "true true" {
		t.Fatalf("the active generation and slot are not those of the last reset %s (generation, slot: %s)", last, got)
	}
}

// requireMutations: every mutation c put on the wire has exactly one recorded
// outcome on the server; an applied one wrote exactly one fence and no
// rejection, any other wrote nothing and is recorded by the replica as a
// rejection with the same code. Mutations that never left the queue are gone
// for a reason: the application deleted its own unpushed insert, or their row
// was rejected.
func (s *sim) requireMutations(c *simClient, outcomes map[string]int) {
	t, ctx := s.t, context.Background()
	if n, err := c.Pending(ctx); err != nil || n != 0 {
		t.Fatalf("%s: %d mutations still queued after settling (%v)", c.name, n, err)
	}
	type recorded struct{ status, code string }
	server := map[string]recorded{}
	for _, row := range rowsOf(t, s.e.d, `SELECT mutation_id, coalesce(outcome->>'status', '<none>'), coalesce(outcome->>'code', '')
		FROM synchro.mutation WHERE client_id = $1`, c.name) {
		p := strings.SplitN(row, "|", 3)
		server[p[0]] = recorded{p[1], p[2]}
	}
	fences := map[string]int{}
	for _, row := range rowsOf(t, s.e.d, `SELECT mutation_id, count(*) FROM synchro.fence WHERE client_id = $1 AND mutation_id IS NOT NULL GROUP BY 1`, c.name) {
		p := strings.SplitN(row, "|", 2)
		fences[p[0]], _ = strconv.Atoi(p[1])
	}
	for k, n := range s.retiredFences {
		if client, id, _ := strings.Cut(k, "/"); client == c.name {
			fences[id] += n
		}
	}
	rejs, err := c.Rejections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]client.Rejection{}
	rejectedRows := map[string]bool{}
	for _, r := range rejs {
		if r.Code == "" || r.Message == "" {
			t.Fatalf("%s: rejection of mutation %s (%s %s) without a code or message: %+v", c.name, r.MutationID, r.Table, r.PK, r)
		}
		if _, dup := rejected[r.MutationID]; dup {
			t.Fatalf("%s: mutation %s rejected twice", c.name, r.MutationID)
		}
		if !c.sent[r.MutationID] {
			t.Fatalf("%s: rejection of mutation %s (%s %s %s), which was never sent", c.name, r.MutationID, r.Table, r.PK, r.Code)
		}
		rejected[r.MutationID] = r
		rejectedRows[r.Table+" "+r.PK] = true
	}
	for _, id := range sortedKeys(c.sent) {
		q := c.queued[id]
		o, ok := server[id]
		if !ok {
			t.Fatalf("%s: mutation %s (%s %s %s) was sent but the server recorded no outcome: lost", c.name, id, q.op, q.tbl, q.pk)
		}
		outcomes[o.status+" "+o.code]++
		switch o.status {
		case "applied":
			if fences[id] != 1 {
				t.Fatalf("%s: applied mutation %s (%s %s %s) wrote %d fences, want exactly 1", c.name, id, q.op, q.tbl, q.pk, fences[id])
			}
			if r, ok := rejected[id]; ok {
				t.Fatalf("%s: mutation %s was applied by the server but the replica recorded it as rejected: %+v", c.name, id, r)
			}
		case "conflict", "rejected":
			if fences[id] != 0 {
				t.Fatalf("%s: mutation %s (%s %s %s) was answered %s %s but wrote %d fences", c.name, id, q.op, q.tbl, q.pk, o.status, o.code, fences[id])
			}
			r, ok := rejected[id]
			if !ok {
				t.Fatalf("%s: mutation %s (%s %s %s) was answered %s %s but the replica recorded no rejection", c.name, id, q.op, q.tbl, q.pk, o.status, o.code)
			}
			if r.Code != o.code {
				t.Fatalf("%s: mutation %s: the replica recorded rejection code %q, the server %q", c.name, id, r.Code, o.code)
			}
		default:
			t.Fatalf("%s: mutation %s has the recorded outcome %q (code %q), not a final one", c.name, id, o.status, o.code)
		}
	}
	for _, id := range sortedKeys(server) {
		if !c.sent[id] {
			t.Fatalf("%s: the server recorded mutation %s, which the replica never sent", c.name, id)
		}
	}
	for _, id := range sortedKeys(fences) {
		if !c.sent[id] {
			t.Fatalf("%s: a fence carries mutation %s, which the replica never sent", c.name, id)
		}
	}
	for _, id := range sortedKeys(c.queued) {
		q := c.queued[id]
		if c.sent[id] {
			continue
		}
		if !(q.op == "upsert" && !q.base) && !rejectedRows[q.tbl+" "+q.pk] {
			t.Fatalf("%s: mutation %s (%s %s %s, base_version %v) left the queue without being sent, and its row was never rejected: lost",
				c.name, id, q.op, q.tbl, q.pk, q.base)
		}
		outcomes["never sent (discarded locally)"]++
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// requireConverged: c holds exactly the scopes assigned to its user, each with a
// cursor, the server's rows and checksum, and its tables hold exactly the rows
// of those scopes, value for value.
func (s *sim) requireConverged(c *simClient) {
	t := s.t
	held, want := requireScopes(t, s.e, c.sdkClient)
	local, server := s.localRows(c), normalize(t, want)
	if !reflect.DeepEqual(local, server) {
		var why []string
		for _, k := range sortedKeys(local) {
			if !reflect.DeepEqual(local[k], server[k]) {
				why = append(why, s.explainRow(c, k))
			}
		}
		for _, k := range sortedKeys(server) {
			if _, ok := local[k]; !ok {
				why = append(why, s.explainRow(c, k))
			}
		}
		t.Fatalf("%s (%s): local tables differ from the server's scopes %v:\n%s\nwhat the server and the replica know of these rows:\n%s",
			c.name, c.user, held, rowDiff(t, local, server), strings.Join(why, "\n"))
	}
}

// explainRow describes a row ("table/pk") for a failure: its current server
// image and membership history, this replica's mutations of it and their
// recorded outcomes, and the replica's side tables for it.
func (s *sim) explainRow(c *simClient, k string) string {
	table, pkText, _ := strings.Cut(k, "/")
	var pk map[string]any
	if err := json.Unmarshal([]byte(pkText), &pk); err != nil {
		return k + ": " + err.Error()
	}
	key := fmt.Sprint(pk["id"])
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n", k)
	for _, line := range rowsOf(s.t, s.e.d, `
		WITH t AS (SELECT table_id FROM synchro.synced_table WHERE name = $1)
		SELECT 'server image: ' || coalesce((SELECT v.image::text FROM synchro.synced_row r JOIN synchro.row_version v ON v.version = r.version
		                                     JOIN synchro.progress p ON p.stream_generation = v.stream_generation
		                                     WHERE r.table_id = t.table_id AND r.key = $2), '<none>')
		FROM t
		UNION ALL
		SELECT 'membership edges (active generation): ' || coalesce((SELECT string_agg(m.scope || ' [' || m.from_lsn || ', ' || coalesce(m.to_lsn::text, 'open') || ')', '; ' ORDER BY m.from_lsn)
		                                         FROM synchro.membership m JOIN synchro.progress p USING (stream_generation)
		                                         WHERE m.table_id = t.table_id AND m.key = $2), '<none>')
		FROM t`, table, key) {
		fmt.Fprintf(&b, "    %s\n", line)
	}
	for _, line := range rowsOf(s.t, s.e.d, `
		SELECT m.mutation_id, m.outcome->>'status', coalesce(m.outcome->>'code', ''), m.recorded_at::text,
		       coalesce((SELECT coalesce(e.commit_lsn::text, 'pending') FROM synchro.fence f LEFT JOIN synchro.event_ledger e ON e.fence_id = f.fence_id WHERE f.client_id = m.client_id AND f.mutation_id = m.mutation_id), 'no fence')
		FROM synchro.mutation m WHERE m.client_id = $1 AND m.outcome->>'table' = $2 AND m.outcome->'pk' = $3::jsonb
		ORDER BY m.recorded_at`, c.name, table, pkText) {
		fmt.Fprintf(&b, "    %s mutation (id|status|code|recorded|fence materialized at): %s\n", c.name, line)
	}
	local := func(what, query string) {
		var v string
		if err := c.DB().QueryRow(query, table, pkText).Scan(&v); err != nil {
			v = err.Error()
		}
		fmt.Fprintf(&b, "    %s %s: %s\n", c.name, what, v)
	}
	local("image", `SELECT coalesce((SELECT row || ' @' || coalesce(server_version, '') FROM _synchro_images WHERE tbl = ? AND pk = ?), '<none>')`)
	local("held by scopes", `SELECT coalesce((SELECT group_concat(scope) FROM _synchro_rows WHERE tbl = ? AND pk = ?), '<none>')`)
	local("queued", `SELECT coalesce((SELECT group_concat(op || ' sent=' || sent) FROM _synchro_queue WHERE tbl = ? AND pk = ?), '<none>')`)
	local("rejections", `SELECT coalesce((SELECT group_concat(code) FROM _synchro_rejections WHERE tbl = ? AND pk = ?), '<none>')`)
	return strings.TrimRight(b.String(), "\n")
}

// localRows is every row of the replica's synced tables, "table/pk" -> row in
// wire form (localValue), as client_test.go's localRows for this schema.
func (s *sim) localRows(c *simClient) map[string]any {
	want := slices.Clone(simTables)
	if s.issuesServed {
		want = append(want, "issues")
		slices.Sort(want)
	}
	if tables := c.Tables(); !slices.Equal(tables, want) {
		s.t.Fatalf("%s: synced tables %v, want %v", c.name, tables, want)
	}
	return localTables(s.t, c.DB(), want)
}

// rowDiff describes how local differs from server, row by row.
func rowDiff(t *testing.T, local, server map[string]any) string {
	var lines []string
	for _, k := range sortedKeys(local) {
		if sv, ok := server[k]; !ok {
			lines = append(lines, fmt.Sprintf("  only local:     %s %s", k, mustMarshal(t, local[k])))
		} else if !reflect.DeepEqual(local[k], sv) {
			lines = append(lines, fmt.Sprintf("  differs:        %s local %s server %s", k, mustMarshal(t, local[k]), mustMarshal(t, sv)))
		}
	}
	for _, k := range sortedKeys(server) {
		if _, ok := local[k]; !ok {
			lines = append(lines, fmt.Sprintf("  only on server: %s %s", k, mustMarshal(t, server[k])))
		}
	}
	return strings.Join(lines, "\n")
}

// report logs what the run exercised, and fails when it exercised too little
// to mean anything.
func (s *sim) report(outcomes map[string]int) {
	t := s.t
	var lines []string
	for _, k := range sortedKeys(s.stats) {
		lines = append(lines, fmt.Sprintf("%s: %d", k, s.stats[k]))
	}
	for _, k := range sortedKeys(outcomes) {
		lines = append(lines, fmt.Sprintf("mutation outcome %s: %d", k, outcomes[k]))
	}
	var rows int64
	for _, table := range []string{"docs", "tasks", "notes", "reports", "templates"} {
		rows += queryInt(t, s.e.d, `SELECT count(*) FROM app.`+table)
	}
	lines = append(lines, fmt.Sprintf("synced rows on the server at the end: %d; source transactions materialized: %d; effects: %d",
		rows, queryInt(t, s.e.d, `SELECT count(*) FROM synchro.txn_ledger`), queryInt(t, s.e.d, `SELECT count(*) FROM synchro.effect`)))
	t.Logf("convergence simulation (SYNCHRO_SEED=%d, %s) converged:\n  %s", s.plan.seed, s.plan, strings.Join(lines, "\n  "))
	if s.step < 150 {
		return // too short to require coverage
	}
	for _, need := range []struct {
		what string
		n    int
	}{
		{"applied mutations", outcomes["applied "]},
		{"version conflicts", outcomes["conflict version_conflict"]},
		{"policy rejections", outcomes["rejected policy_rejected"]},
		{"validation failures", outcomes["rejected validation_failed"]},
		{"worker kills", s.stats["worker kills"] + s.stats["worker crashes at a step boundary"]},
		{"answers lost after the server processed the request", s.stats["http: answer lost after the server processed the request"]},
		{"ownership transfers", s.stats["ownership transfers"]},
		{"membership changes", s.stats["membership changes"]},
		{"scope assignment changes", s.stats["scope assignment changes"]},
		{"activated stream resets", s.stats["stream resets activated"]},
	} {
		if need.n == 0 {
			t.Fatalf("the run exercised no %s: the simulation is too short or its mix is broken", need.what)
		}
	}
	if s.pgData != "" && s.crashes == 0 {
		t.Fatal("the run never restarted PostgreSQL although SYNCHRO_TEST_PGDATA is set")
	}
	s.requireRetentionExercised()
}
