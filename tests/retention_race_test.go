package tests

// Pruning of the pull history (synchro.prune_history) racing materialization,
// pull and rebuild: the horizon moves under pages being answered, and the
// checksum of every final page is the oracle that no page had a gap.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// raceCounts is what TestRetentionRace's goroutines did.
type raceCounts struct {
	syncs         atomic.Int64 // completed sync cycles of the clients
	expired       atomic.Int64 // rebuild pages answered 410 rebuild_expired
	rebuildListed atomic.Int64 // scopes a pull answered in rebuild
	rebuilt       atomic.Int64 // rebuild sessions completed (checksum verified)
	changes       atomic.Int64 // changes pull pages delivered
	finalPages    atomic.Int64 // final pull pages whose checksums were verified
	batches       atomic.Int64 // pruning batches of the test's pruner that moved the horizon
	pruned        atomic.Int64 // rows they removed
	lockTimeouts  atomic.Int64 // pruning batches that gave up on a lock
	writes        atomic.Int64 // source transactions committed
	deadlocks     atomic.Int64 // writes rolled back as deadlock victims
	clientFailed  atomic.Bool  // a client gave up: the writers stop waiting for syncs
}

// raceHTTP is the clients' HTTP client: a request that hangs fails.
var raceHTTP = &http.Client{Timeout: time.Minute}

// raceClient is a replica of TestRetentionRace that syncs on a goroutine of
// its own: it rebuilds the scopes without a cursor (restarting a session the
// horizon overtook) and pulls the others, with small pages. It reports what
// goes wrong as an error (only the test's goroutine may fail the test).
type raceClient struct {
	url, token, id string
	limit          int
	r              *replica
	n              *raceCounts
}

func (c *raceClient) post(path string, body any) (int, map[string]any, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(http.MethodPost, c.url+path, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := raceHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return 0, nil, fmt.Errorf("%s: answer %d is not JSON: %w", path, res.StatusCode, err)
	}
	return res.StatusCode, out, nil
}

// sync rebuilds every scope without a cursor, then pulls; it reports whether
// the pull put a scope in rebuild.
func (c *raceClient) sync() (rebuildListed bool, err error) {
	for scope, cur := range c.r.cursors {
		if cur == nil {
			if err := c.rebuild(scope); err != nil {
				return false, err
			}
		}
	}
	listed, err := c.pull()
	c.n.syncs.Add(1)
	return listed, err
}

// rebuild runs rebuild sessions of scope until one ends, each from cursor
// null: one answered rebuild_expired on a page is restarted.
func (c *raceClient) rebuild(scope string) error {
	for {
		if done, err := c.session(scope); done || err != nil {
			return err
		}
		c.n.expired.Add(1)
	}
}

// session runs one rebuild session of scope; false when the horizon overtook
// it. Its final page's checksum must be the sum of the rows its pages gave.
func (c *raceClient) session(scope string) (bool, error) {
	staged := &replica{rows: map[string]map[string]replicaRow{scope: {}}, cursors: map[string]any{}}
	var cursor any
	for {
		status, body, err := c.post("/sync/rebuild", map[string]any{"client_id": c.id, "scope": scope, "cursor": cursor, "limit": c.limit})
		switch {
		case err != nil:
			return false, err
		case status == http.StatusGone && (reply{Body: body}).errorCode() == "rebuild_expired":
			return false, nil
		case status != http.StatusOK:
			return false, fmt.Errorf("%s: rebuild of %s: %d %v", c.id, scope, status, body)
		}
		for _, it := range body["records"].([]any) {
			rec := it.(map[string]any)
			staged.rows[scope][rowKey(rec["table"].(string), rec["pk"])] = replicaRow{Row: rec["row"].(map[string]any),
				Version: rec["server_version"].(string), Checksum: uint32(rec["row_checksum"].(float64))}
		}
		if body["has_more"] == true {
			cursor = body["cursor"]
			continue
		}
		if got, want := staged.checksum(scope), body["checksum"]; got != want {
			return false, fmt.Errorf("%s: rebuild of %s: the pages' rows sum to %s, the final page's checksum is %v: a page missed or repeated rows", c.id, scope, got, want)
		}
		c.r.rows[scope], c.r.cursors[scope] = staged.rows[scope], body["final_scope_cursor"]
		c.n.rebuilt.Add(1)
		return true, nil
	}
}

// pull pages the changes of the scopes with a cursor until has_more is false;
// a scope the answer lists in rebuild loses its cursor. The final page's
// checksum of every scope it served must be the replica's.
func (c *raceClient) pull() (rebuildListed bool, err error) {
	for {
		scopes := map[string]any{}
		for s, cur := range c.r.cursors {
			if cur != nil {
				scopes[s] = map[string]any{"cursor": cur}
			}
		}
		if len(scopes) == 0 {
			return rebuildListed, nil
		}
		status, body, err := c.post("/sync/pull", map[string]any{"client_id": c.id, "scopes": scopes, "limit": c.limit})
		if err != nil {
			return false, err
		}
		if status != http.StatusOK {
			return false, fmt.Errorf("%s: pull: %d %v", c.id, status, body)
		}
		if err := c.r.applyPage(body); err != nil {
			return false, err
		}
		c.n.changes.Add(int64(len(body["changes"].([]any))))
		for _, s := range body["rebuild"].([]any) {
			c.r.cursors[s.(string)] = nil
			c.n.rebuildListed.Add(1)
			rebuildListed = true
		}
		if body["has_more"] == true {
			continue
		}
		checksums, _ := body["checksums"].(map[string]any)
		for s := range body["scope_cursors"].(map[string]any) {
			if got, want := c.r.checksum(s), checksums[s]; got != want {
				return false, fmt.Errorf("%s: final pull page: scope %s sums to %s on the replica, the page's checksum is %v: a page had a gap", c.id, s, got, want)
			}
		}
		c.n.finalPages.Add(1)
		return rebuildListed, nil
	}
}

// raceWrite is one source transaction of 1 to 3 writes to the users' scopes
// (rows picked on the server): docs (column rule), tasks and their projects
// (path rule), notes and their members (members rule), with ownership and
// membership moves; ids are prefixed by the writer.
func raceWrite(rng *rand.Rand, writer string, seq int) string {
	user := func() string { return fmt.Sprintf("'u%d'", 1+rng.IntN(4)) }
	var stmts []string
	for i := range 1 + rng.IntN(3) {
		id := fmt.Sprintf("'%s-%d-%d'", writer, seq, i)
		switch rng.IntN(10) {
		case 0:
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO app.docs (id, owner_id, title) VALUES (%s, %s, 'new')`, id, user()))
		case 1:
			stmts = append(stmts, fmt.Sprintf(`UPDATE app.docs SET title = %s WHERE id = (SELECT id FROM app.docs ORDER BY random() LIMIT 1)`, id))
		case 2:
			stmts = append(stmts, fmt.Sprintf(`UPDATE app.docs SET owner_id = %s WHERE id = (SELECT id FROM app.docs ORDER BY random() LIMIT 1)`, user()))
		case 3:
			stmts = append(stmts, `DELETE FROM app.docs WHERE id = (SELECT id FROM app.docs ORDER BY random() LIMIT 1)`)
		case 4:
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO app.tasks VALUES (nextval('app.race_ids'), (SELECT id FROM app.projects ORDER BY random() LIMIT 1), %s)`, id))
		case 5:
			stmts = append(stmts, `UPDATE app.tasks SET project_id = (SELECT id FROM app.projects ORDER BY random() LIMIT 1)
				WHERE id = (SELECT id FROM app.tasks ORDER BY random() LIMIT 1)`)
		case 6:
			stmts = append(stmts, fmt.Sprintf(`UPDATE app.projects SET owner_id = %s WHERE id = (SELECT id FROM app.projects ORDER BY random() LIMIT 1)`, user()))
		case 7:
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO app.notes VALUES (%s, 'new'); INSERT INTO app.note_members (note_id, user_id) VALUES (%s, %s)`, id, id, user()))
		case 8:
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO app.note_members (note_id, user_id) SELECT id, %s FROM app.notes ORDER BY random() LIMIT 1`, user()))
		default:
			stmts = append(stmts, `DELETE FROM app.note_members WHERE id = (SELECT id FROM app.note_members ORDER BY random() LIMIT 1)`)
		}
	}
	return strings.Join(stmts, ";\n")
}

// raceWriter commits writes transactions, each once the one before is
// materialized; every tenth waits until the clients have completed a sync
// cycle each since, so that sessions and pulls also complete between writes.
// A deadlock victim is counted and dropped.
func raceWriter(ctx context.Context, pool *pgxpool.Pool, n *raceCounts, clients, writes int, name string, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0))
	for seq := range writes {
		_, err := pool.Exec(ctx, raceWrite(rng, name, seq))
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "40P01":
			n.deadlocks.Add(1)
		case err != nil:
			return fmt.Errorf("writer %s: %w", name, err)
		default:
			n.writes.Add(1)
		}
		var target string
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&target); err != nil {
			return err
		}
		if err := waitUntil("the write to be materialized", time.Minute, func() (bool, error) {
			var done bool
			err := pool.QueryRow(ctx, `SELECT processed_end_lsn >= $1::pg_lsn FROM synchro.progress`, target).Scan(&done)
			return done, err
		}); err != nil {
			return fmt.Errorf("writer %s: %w", name, err)
		}
		if seq%10 == 9 {
			target := n.syncs.Load() + int64(clients)
			if err := waitUntil("the clients to sync", time.Minute, func() (bool, error) {
				if n.clientFailed.Load() {
					return false, errors.New("a client failed")
				}
				return n.syncs.Load() >= target, nil
			}); err != nil {
				return fmt.Errorf("writer %s: %w", name, err)
			}
		}
	}
	return nil
}

// racePruner prunes in a loop until ctx ends: each round draws a retention
// of 0, 250 ms or 5 s (so that cursors are sometimes overtaken at once,
// sometimes resumed) and calls prune_history with batches of a few events
// until nothing that old is left, then waits for the next materialized change
// (synchro_changes), not for a time. A batch that gave up on a lock
// (lock_timeout) is counted and retried.
func racePruner(ctx context.Context, conn *pgx.Conn, n *raceCounts, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 1))
	if _, err := conn.Exec(ctx, `LISTEN synchro_changes`); err != nil {
		return err
	}
	for ctx.Err() == nil {
		keep := []time.Duration{0, 250 * time.Millisecond, 5 * time.Second}[rng.IntN(3)]
		for txns := int64(1); txns > 0; {
			var removed int64
			err := conn.QueryRow(ctx, `SELECT transactions, effects + versions + edges + digests FROM synchro.prune_history($1, $2, now())`,
				keep, []int{1, 2, 5, 50}[rng.IntN(4)]).Scan(&txns, &removed)
			var pe *pgconn.PgError
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.As(err, &pe) && pe.Code == "55P03":
				n.lockTimeouts.Add(1)
			case err != nil:
				return fmt.Errorf("pruner: %w", err)
			case txns > 0:
				n.batches.Add(1)
				n.pruned.Add(removed)
			}
		}
		if _, err := conn.WaitForNotification(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("pruner: %w", err)
		}
	}
	return nil
}

// TestRetentionRace: writers commit direct SQL writes to four users' scopes
// (every rule kind but shared, ownership and membership moves among them)
// while a pruner moves the retention horizon in a loop with a retention of 0
// to 5 s and batches of a few events, and the worker prunes too (2 s
// retention, every 5 ms); six clients pull and rebuild their scopes with pages of 1 to 3
// throughout. No final pull or rebuild page may have a checksum the replica's
// rows do not sum to; at the end every client holds its scopes exactly, the
// digests agree with the history pruning left, and the run must have pruned,
// expired rebuild sessions and sent cursors to rebuild.
func TestRetentionRace(t *testing.T) {
	t.Parallel()
	var seed strings.Builder
	seed.WriteString("CREATE SEQUENCE app.race_ids START 1000;\nINSERT INTO app.templates VALUES (1, 'welcome');\n")
	for u := 1; u <= 4; u++ {
		for i := range 5 {
			fmt.Fprintf(&seed, "INSERT INTO app.docs (id, owner_id, title) VALUES ('d%d-%d', 'u%d', 'seed');\n", u, i, u)
		}
		for p := range 2 {
			fmt.Fprintf(&seed, "INSERT INTO app.projects VALUES ('p%d-%d', 'u%d');\n", u, p, u)
			fmt.Fprintf(&seed, "INSERT INTO app.tasks SELECT nextval('app.race_ids'), 'p%d-%d', 'seed' FROM generate_series(1, 3);\n", u, p)
		}
		fmt.Fprintf(&seed, "INSERT INTO app.notes VALUES ('n%d', 'seed');\nINSERT INTO app.note_members (note_id, user_id) VALUES ('n%d', 'u%d'), ('n%d', 'u%d');\n",
			u, u, u, u, u%4+1)
	}
	e := newSyncEnv(t, seed.String())
	d := e.d
	cfg := e.cfg
	cfg.PullHistoryRetention, cfg.PruneInterval = 2*time.Second, 5*time.Millisecond
	if err := e.w.stop(t); err != nil {
		t.Fatalf("stopping the worker: %v", err)
	}
	e.w = startStreaming(t, d, cfg)

	n := &raceCounts{}
	var clients []*raceClient
	for i := range 6 {
		user := fmt.Sprintf("u%d", 1+i%3)
		c := &raceClient{url: e.url, token: token(t, user), id: fmt.Sprintf("c%d", i), limit: 1 + i%3, r: newReplica(), n: n}
		for _, it := range e.connect(t, user, c.id)["scopes"].(map[string]any)["add"].([]any) {
			c.r.cursors[it.(map[string]any)["id"].(string)] = nil
		}
		clients = append(clients, c)
	}
	startHorizon := horizon(t, d)

	ctx, stopPruner := context.WithCancel(context.Background())
	defer stopPruner()
	pruned := make(chan error, 1)
	conn := ownConn(t, d)
	go func() { pruned <- racePruner(ctx, conn, n, 36) }()

	// The clients sync until the writers are done and everything written is
	// materialized (quiet), then until a cycle puts no scope in rebuild.
	quiet := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, len(clients)+2)
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for settled := false; ; {
				select {
				case <-quiet:
					settled = true
				default:
				}
				listed, err := c.sync()
				if err != nil {
					n.clientFailed.Store(true)
					errs <- err
					return
				}
				if settled && !listed {
					return
				}
			}
		}()
	}
	var writers sync.WaitGroup
	for i := range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			if err := raceWriter(context.Background(), d.Pool, n, len(clients), 40, fmt.Sprintf("w%d", i), uint64(i)); err != nil {
				errs <- err
			}
		}()
	}
	writers.Wait()
	waitMaterialized(t, d)
	close(quiet)
	wg.Wait()
	stopPruner()
	if err := <-pruned; err != nil {
		t.Fatal(err)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Logf("writes %d (deadlock victims %d), pruner batches %d removing %d rows (lock timeouts %d), horizon %s -> %s; "+
		"syncs %d, rebuild sessions %d, expired %d, scopes sent to rebuild by pull %d, changes pulled %d, final pull pages %d",
		n.writes.Load(), n.deadlocks.Load(), n.batches.Load(), n.pruned.Load(), n.lockTimeouts.Load(), startHorizon, horizon(t, d),
		n.syncs.Load(), n.rebuilt.Load(), n.expired.Load(), n.rebuildListed.Load(), n.changes.Load(), n.finalPages.Load())
	for _, c := range clients {
		for scope, cur := range c.r.cursors {
			if cur == nil {
				t.Fatalf("%s: scope %s has no cursor after settling", c.id, scope)
			}
			e.requireConverged(t, c.r, scope)
		}
	}
	requireDigests(t, d)
	requireEffectVersions(t, d)
	for _, need := range []struct {
		what string
		n    int64
	}{
		{"pruning batches that moved the horizon", n.batches.Load()},
		{"rows removed by pruning", n.pruned.Load()},
		{"rebuild sessions overtaken (rebuild_expired)", n.expired.Load()},
		{"cursors a pull sent to rebuild", n.rebuildListed.Load()},
		{"changes pulled", n.changes.Load()},
	} {
		if need.n == 0 {
			t.Errorf("the run had no %s: it proves nothing about pruning racing pull and rebuild", need.what)
		}
	}
}
