package tests

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pagingDelivery renders one delivered pull change (or one expected effect) as
// "scope|table/pk|op|server_version", the unit the paging tests compare.
func pagingDelivery(scope, table string, pk any, op, version string) string {
	return scope + "|" + rowKey(table, pk) + "|" + op + "|" + version
}

// pagingPull pulls the replica's scopes with page size limit until has_more is
// false, applying every page, and returns every delivered change (in delivery
// order) and the pages. It checks the checksum rules of every page: a page with
// has_more true carries no checksums; the final page carries a checksum for
// every scope it returned a cursor for, and it equals the replica's sum.
func (e *syncEnv) pagingPull(t *testing.T, user, client string, limit int, r *replica) ([]string, []map[string]any) {
	t.Helper()
	var delivered []string
	var pages []map[string]any
	for page := 0; ; page++ {
		if page > 100000 {
			t.Fatal("pull does not end")
		}
		scopes := map[string]any{}
		for s, c := range r.cursors {
			scopes[s] = map[string]any{"cursor": c}
		}
		body := requireOK(t, "pull", e.post(t, user, "/sync/pull",
			map[string]any{"client_id": client, "scopes": scopes, "limit": limit}))
		changes := body["changes"].([]any)
		if len(changes) > limit {
			t.Fatalf("pull with limit %d returned %d changes", limit, len(changes))
		}
		for _, it := range changes {
			c := it.(map[string]any)
			version, _ := c["server_version"].(string)
			delivered = append(delivered, pagingDelivery(c["scope"].(string), c["table"].(string), c["pk"], c["op"].(string), version))
		}
		r.apply(t, body)
		pages = append(pages, body)
		if body["has_more"] == true {
			if _, ok := body["checksums"]; ok {
				t.Fatalf("pull page %d with has_more true carries checksums: %s", page, mustMarshal(t, body["checksums"]))
			}
			if len(changes) == 0 {
				t.Fatalf("pull page %d with has_more true delivered nothing", page)
			}
			continue
		}
		if body["has_more"] != false {
			t.Fatalf("pull page %d: has_more is %v", page, body["has_more"])
		}
		checksums, ok := body["checksums"].(map[string]any)
		if !ok {
			t.Fatalf("final pull page carries no checksums: %s", mustMarshal(t, body))
		}
		cursors := body["scope_cursors"].(map[string]any)
		if len(checksums) != len(cursors) {
			t.Fatalf("final pull page: checksums for %v, cursors for %v", mustMarshal(t, checksums), mustMarshal(t, cursors))
		}
		for s := range cursors {
			want, ok := checksums[s].(string)
			if !ok {
				t.Fatalf("final pull page: no checksum string for served scope %s: %s", s, mustMarshal(t, checksums))
			}
			if got := r.checksum(s); got != want {
				t.Fatalf("pull of %s: replica checksum %s, server checksum %s", s, got, want)
			}
		}
		return delivered, pages
	}
}

// pagingRebuild pages a rebuild of scope like rebuildScope, calling after (if
// not nil) after every page but the last, and returns the final page.
func (e *syncEnv) pagingRebuild(t *testing.T, user, client, scope string, limit int, r *replica, after func(page int)) map[string]any {
	t.Helper()
	r.rows[scope] = map[string]replicaRow{}
	var cursor any
	for page := 0; ; page++ {
		if page > 100000 {
			t.Fatal("rebuild does not end")
		}
		body := requireOK(t, "rebuild", e.post(t, user, "/sync/rebuild",
			map[string]any{"client_id": client, "scope": scope, "cursor": cursor, "limit": limit}))
		records := body["records"].([]any)
		if len(records) > limit {
			t.Fatalf("rebuild with limit %d returned %d records", limit, len(records))
		}
		for _, it := range records {
			rec := it.(map[string]any)
			k := rowKey(rec["table"].(string), rec["pk"])
			if _, dup := r.rows[scope][k]; dup {
				t.Fatalf("rebuild of %s delivered %s twice", scope, k)
			}
			r.rows[scope][k] = replicaRow{Row: rec["row"].(map[string]any), Version: rec["server_version"].(string),
				Checksum: uint32(rec["row_checksum"].(float64))}
		}
		if body["has_more"] == false {
			if body["cursor"] != nil {
				t.Fatalf("final rebuild page has a session cursor: %v", body["cursor"])
			}
			if got, want := r.checksum(scope), body["checksum"]; got != want {
				t.Fatalf("rebuild of %s: replica checksum %s, server checksum %v", scope, got, want)
			}
			r.cursors[scope] = body["final_scope_cursor"]
			return body
		}
		if _, ok := body["checksum"]; ok {
			t.Fatalf("rebuild page %d with has_more true carries a checksum", page)
		}
		cursor = body["cursor"]
		if after != nil {
			after(page)
		}
	}
}

// expectedEffects lists the effects of scopes after commit LSN since, in the
// delivery order of pull ((position, scope)), rendered like pagingDelivery.
func expectedEffects(t *testing.T, e *syncEnv, since string, scopes ...string) []string {
	t.Helper()
	rows, err := e.d.Pool.Query(context.Background(), `
		SELECT f.scope, t.name, synchro.wire_pk(r.key_column, r.key_type, f.key), f.op, coalesce(f.version, '')
		FROM synchro.effect f
		JOIN synchro.progress p ON p.stream_generation = f.stream_generation
		JOIN synchro.synced_table t ON t.table_id = f.table_id
		JOIN synchro.relation r ON r.relation_id = t.relation_id
		WHERE f.scope = ANY ($1) AND f.commit_lsn > $2::pg_lsn AND f.commit_lsn <= p.materialized_commit_lsn
		ORDER BY f.commit_lsn, f.event_ordinal, f.effect_ordinal, f.scope COLLATE "C"`, scopes, since)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var scope, table, op, version string
		var pk map[string]any
		if err := rows.Scan(&scope, &table, &pk, &op, &version); err != nil {
			t.Fatal(err)
		}
		out = append(out, pagingDelivery(scope, table, pk, op, version))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// materializedLSN is the commit LSN of the last materialized transaction.
func materializedLSN(t *testing.T, e *syncEnv) string {
	t.Helper()
	return queryText(t, e.d, `SELECT coalesce(materialized_commit_lsn, '0/0')::text FROM synchro.progress`)
}

// serverChecksum is the scope checksum at the materialized high-watermark.
func serverChecksum(t *testing.T, e *syncEnv, scope string) string {
	t.Helper()
	return queryText(t, e.d, `SELECT synchro.scope_checksum(p.stream_generation, $1, coalesce(p.materialized_commit_lsn, '0/0'))
		FROM synchro.progress p`, scope)
}

// requireSameList fails unless got equals want element by element, naming the
// first difference.
func requireSameList(t *testing.T, what string, got, want []string) {
	t.Helper()
	for i := 0; i < len(got) && i < len(want); i++ {
		if got[i] != want[i] {
			t.Fatalf("%s: element %d is %s, want %s", what, i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
}

// replicaRowsJSON renders the rows of a replica's scope (image, version and
// checksum) for comparison between replicas.
func replicaRowsJSON(t *testing.T, r *replica, scope string) string {
	t.Helper()
	return mustMarshal(t, r.rows[scope])
}

// TestSyncPagingEquivalence: ~400 changes of every kind (inserts, updates,
// deletes, owner moves in and out, several changes of one row per transaction,
// dependency changes that move many rows in one event, membership changes,
// shared-scope changes) pulled from one position with limit 1, 7 and 500 by
// three clients: every page size delivers exactly the effects of the stream in
// position order (no repeat, no skip), and all three replicas end equal to each
// other and to the server, with the server's final checksum.
func TestSyncPagingEquivalence(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.projects VALUES ('p1', 'u1'), ('p2', 'u2'), ('p3', 'u1');
		INSERT INTO app.templates VALUES (1, 'welcome');
		INSERT INTO app.docs (id, owner_id, title) VALUES ('seed', 'u1', 'seed')`)
	scopes := []string{"templates_public", "user:u1"}
	limits := []int{1, 7, 500}
	replicas := map[int]*replica{}
	for _, limit := range limits {
		client := fmt.Sprintf("c%d", limit)
		e.connect(t, "u1", client)
		r := newReplica()
		for _, s := range scopes {
			e.rebuildScope(t, "u1", client, s, 1000, r)
		}
		replicas[limit] = r
	}
	replicasAtStart := map[string]map[string]string{}
	for _, s := range scopes {
		replicasAtStart[s] = map[string]string{}
		for k, row := range replicas[1].rows[s] {
			replicasAtStart[s][k] = row.Version
		}
	}
	// No write to a registered table happens between the rebuilds and here, so
	// the rebuilds' position and since have no effect between them.
	since := materializedLSN(t, e)

	var txns []string
	var b strings.Builder
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&b, "INSERT INTO app.docs (id, owner_id, title, n) VALUES ('d%03d', 'u1', 't', %d);", i, i)
	}
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&b, "INSERT INTO app.docs (id, owner_id, title, n) VALUES ('e%03d', 'u2', 'other', %d);", i, i)
	}
	txns = append(txns, b.String())
	b.Reset()
	for i := 1; i <= 70; i++ {
		p := "p1"
		if i > 40 {
			p = "p2"
		}
		if i > 60 {
			p = "p3"
		}
		fmt.Fprintf(&b, "INSERT INTO app.tasks VALUES (%d, '%s', 'task %d');", i, p, i)
	}
	txns = append(txns, b.String())
	b.Reset()
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&b, "INSERT INTO app.notes VALUES ('n%02d', 'note %d');", i, i)
		if i < 7 {
			fmt.Fprintf(&b, "INSERT INTO app.note_members (note_id, user_id) VALUES ('n%02d', 'u1');", i)
		}
		fmt.Fprintf(&b, "INSERT INTO app.note_members (note_id, user_id) VALUES ('n%02d', 'u2');", i)
	}
	txns = append(txns, b.String())
	for i := 0; i < 20; i++ {
		b.Reset()
		fmt.Fprintf(&b, "UPDATE app.docs SET n = n + 1, title = 'x%d' WHERE id IN ('d%03d', 'd%03d');", i, 20+i, 40+i)
		fmt.Fprintf(&b, "UPDATE app.docs SET title = 'twice' WHERE id = 'd%03d';", i)
		fmt.Fprintf(&b, "UPDATE app.docs SET title = 'thrice', meta = '{\"i\": %d}' WHERE id = 'd%03d';", i, i)
		if i%4 == 0 {
			fmt.Fprintf(&b, "DELETE FROM app.docs WHERE id = 'd%03d';", i)
		}
		if i%3 == 0 {
			fmt.Fprintf(&b, "UPDATE app.docs SET owner_id = 'u2' WHERE id = 'd%03d';", 20+i)
		}
		fmt.Fprintf(&b, "UPDATE app.docs SET owner_id = 'u1', title = 'moved in' WHERE id = 'e%03d';", i)
		if i%5 == 0 {
			fmt.Fprintf(&b, "INSERT INTO app.templates VALUES (%d, 'template %d');", 100+i, i)
		}
		if i == 7 {
			b.WriteString("UPDATE app.templates SET name = 'hello' WHERE id = 1;")
		}
		if i == 9 {
			// A row that moves out and back in within one transaction, and a
			// row inserted and deleted within one: no net change of membership.
			b.WriteString("UPDATE app.docs SET owner_id = 'u2' WHERE id = 'd050'; UPDATE app.docs SET owner_id = 'u1' WHERE id = 'd050';")
			b.WriteString("INSERT INTO app.docs (id, owner_id) VALUES ('tmp', 'u1'); DELETE FROM app.docs WHERE id = 'tmp';")
		}
		txns = append(txns, b.String())
	}
	txns = append(txns,
		// One event moving 40 tasks out of user:u1, then two events moving 60 in.
		"UPDATE app.projects SET owner_id = 'u2' WHERE id = 'p1'",
		"UPDATE app.projects SET owner_id = 'u1' WHERE id IN ('p1', 'p2')",
		`DELETE FROM app.note_members WHERE user_id = 'u1' AND note_id IN ('n00', 'n01');
		 INSERT INTO app.note_members (note_id, user_id) VALUES ('n08', 'u1'), ('n09', 'u1');
		 UPDATE app.notes SET title = 'renamed' WHERE id IN ('n02', 'n03', 'n08')`,
		`UPDATE app.tasks SET title = 'moved', project_id = 'p2' WHERE id BETWEEN 61 AND 65;
		 UPDATE app.projects SET owner_id = 'u2' WHERE id = 'p3';
		 DELETE FROM app.tasks WHERE id <= 5;
		 DELETE FROM app.templates WHERE id = 105`,
		"UPDATE app.docs SET meta = jsonb_build_object('final', n) WHERE owner_id = 'u1'",
		"DELETE FROM app.docs WHERE id = 'seed'",
	)
	for _, sql := range txns {
		commitTxn(t, e.d, sql)
	}
	waitMaterialized(t, e.d)

	want := expectedEffects(t, e, since, scopes...)
	t.Logf("%d effects after the start position", len(want))
	if len(want) < 300 {
		t.Fatalf("the writes produced only %d effects in %v; the test needs at least 300", len(want), scopes)
	}
	// Some event must have several effects in user:u1 for the limit-1 pull to cut
	// inside it.
	if n := queryInt(t, e.d, `SELECT count(*) FROM (SELECT FROM synchro.effect WHERE scope = 'user:u1' AND commit_lsn > $1::pg_lsn
		GROUP BY commit_lsn, event_ordinal HAVING count(*) >= 40) x`, since); n < 1 {
		t.Fatal("no event produced 40 effects in user:u1")
	}

	delivered := map[int][]string{}
	pageCount := map[int]int{}
	for _, limit := range limits {
		got, pages := e.pagingPull(t, "u1", fmt.Sprintf("c%d", limit), limit, replicas[limit])
		delivered[limit] = got
		pageCount[limit] = len(pages)
		requireSameList(t, fmt.Sprintf("changes delivered with limit %d", limit), got, want)
	}
	if pageCount[1] != len(want)+1 && pageCount[1] != len(want) {
		t.Fatalf("limit 1: %d pages for %d changes", pageCount[1], len(want))
	}
	requireSameList(t, "limit 1 against limit 500", delivered[1], delivered[500])
	// A repeated or skipped effect breaks the state machine of a row in a scope:
	// an upsert always changes what the client holds (a new version, or the row
	// joining), and a delete always removes a held row.
	held := map[string]string{}
	for _, s := range scopes {
		for k, row := range replicasAtStart[s] {
			held[s+"|"+k] = row
		}
	}
	for i, d := range delivered[1] {
		parts := strings.Split(d, "|")
		k := parts[0] + "|" + parts[1]
		switch parts[2] {
		case "upsert":
			if held[k] == parts[3] {
				t.Fatalf("limit 1, change %d: %s repeats the state the client holds", i, d)
			}
			held[k] = parts[3]
		case "delete":
			if _, ok := held[k]; !ok {
				t.Fatalf("limit 1, change %d: %s deletes a row the client does not hold", i, d)
			}
			delete(held, k)
		}
	}

	for _, s := range scopes {
		want := serverChecksum(t, e, s)
		for _, limit := range limits {
			e.requireConverged(t, replicas[limit], s)
			if got := replicas[limit].checksum(s); got != want {
				t.Fatalf("limit %d: replica checksum of %s is %s, server %s", limit, s, got, want)
			}
		}
		if a, b, c := replicaRowsJSON(t, replicas[1], s), replicaRowsJSON(t, replicas[7], s), replicaRowsJSON(t, replicas[500], s); a != b || b != c {
			t.Fatalf("scope %s: replicas differ\nlimit 1: %s\nlimit 7: %s\nlimit 500: %s", s, a, b, c)
		}
	}

	// A further pull from the end delivers nothing, with the same checksums.
	for _, limit := range limits {
		got, pages := e.pagingPull(t, "u1", fmt.Sprintf("c%d", limit), limit, replicas[limit])
		if len(got) != 0 || len(pages) != 1 {
			t.Fatalf("limit %d: a pull at the end delivered %v in %d pages", limit, got, len(pages))
		}
	}
}

// TestSyncPageBoundaryInsideEvent: one event (a project's owner change) moves
// three tasks out of user:u1 and into user:u2, so it has three effects in each
// scope, sharing (commit_lsn, event_ordinal) with effect ordinals 0, 1, 2. Pulls
// with limit 1 and 2 stop between these effects and deliver each exactly once.
func TestSyncPageBoundaryInsideEvent(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.projects VALUES ('p1', 'u1'), ('p2', 'u1');
		INSERT INTO app.tasks VALUES (1, 'p1', 'a'), (2, 'p1', 'b'), (3, 'p1', 'c'), (4, 'p2', 'd')`)
	type client struct {
		user, id string
		limit    int
		r        *replica
	}
	var clients []*client
	for _, user := range []string{"u1", "u2"} {
		for _, limit := range []int{1, 2} {
			c := &client{user: user, id: fmt.Sprintf("%s-%d", user, limit), limit: limit, r: newReplica()}
			e.connect(t, user, c.id)
			e.rebuildScope(t, user, c.id, "user:"+user, 1000, c.r)
			clients = append(clients, c)
		}
	}
	if n := len(clients[0].r.rows["user:u1"]); n != 4 {
		t.Fatalf("user:u1 holds %d rows before the move, want 4", n)
	}

	since := materializedLSN(t, e)
	// The move event comes first in its transaction and is followed by another
	// event with an effect in user:u1, so a page can cut inside the move and
	// then continue into the next event.
	c := commitTxn(t, e.d, `UPDATE app.projects SET owner_id = 'u2' WHERE id = 'p1';
		UPDATE app.tasks SET title = 'after' WHERE id = 4`)
	waitMaterialized(t, e.d)
	commitLSN, _, _, _ := ledgerOf(t, e.d, c)
	for _, tc := range []struct{ scope, want string }{
		{"user:u1", "0/0:1:delete 0/1:2:delete 0/2:3:delete 1/0:4:upsert"},
		{"user:u2", "0/0:1:upsert 0/1:2:upsert 0/2:3:upsert"},
	} {
		got := strings.Join(rowsOf(t, e.d, `
			SELECT event_ordinal || '/' || effect_ordinal || ':' || key || ':' || op FROM synchro.effect
			WHERE scope = $1 AND commit_lsn = $2::pg_lsn ORDER BY event_ordinal, effect_ordinal`, tc.scope, commitLSN), " ")
		if got != tc.want {
			t.Fatalf("effects of the move in %s: %s, want %s", tc.scope, got, tc.want)
		}
	}

	for _, cl := range clients {
		scope := "user:" + cl.user
		got, pages := e.pagingPull(t, cl.user, cl.id, cl.limit, cl.r)
		wantNow := expectedEffects(t, e, since, scope)
		requireSameList(t, "pull of "+cl.id, got, wantNow)
		n := 3
		if cl.user == "u1" {
			n = 4
		}
		if len(got) != n {
			t.Fatalf("%s delivered %d changes, want %d: %v", cl.id, len(got), n, got)
		}
		if wantPages := (n + cl.limit - 1) / cl.limit; len(pages) != wantPages && len(pages) != wantPages+1 {
			t.Fatalf("%s: %d pages for %d changes with limit %d", cl.id, len(pages), n, cl.limit)
		}
		seen := map[string]bool{}
		for _, d := range got {
			if seen[d] {
				t.Fatalf("%s: %s delivered twice", cl.id, d)
			}
			seen[d] = true
		}
		e.requireConverged(t, cl.r, scope)
		again, _ := e.pagingPull(t, cl.user, cl.id, cl.limit, cl.r)
		if len(again) != 0 {
			t.Fatalf("%s: a pull at the end delivered %v", cl.id, again)
		}
	}
	if n := len(clients[0].r.rows["user:u1"]); n != 1 {
		t.Fatalf("user:u1 holds %d rows after the move, want 1", n)
	}
	if n := len(clients[2].r.rows["user:u2"]); n != 3 {
		t.Fatalf("user:u2 holds %d rows after the move, want 3", n)
	}
}

// TestSyncRebuildDuringConcurrentWrites: a writer keeps changing user:u1 and
// user:u2 (inserts, updates, deletes, owner moves, dependency moves) while a
// rebuild of user:u1 pages with limit 3. Every page reflects the session's one
// position: a row deleted and a row updated after the first page still appear
// as they were, a row inserted after it does not. Incremental pull from the
// final scope cursor then converges to the server row for row, with checksums.
func TestSyncRebuildDuringConcurrentWrites(t *testing.T) {
	var setup strings.Builder
	setup.WriteString("INSERT INTO app.projects VALUES ('p1', 'u1'), ('p2', 'u2');")
	for i := 0; i < 150; i++ {
		fmt.Fprintf(&setup, "INSERT INTO app.docs (id, owner_id, title, n) VALUES ('d%03d', 'u1', 'orig', %d);", i, i)
	}
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&setup, "INSERT INTO app.docs (id, owner_id, title, n) VALUES ('o%03d', 'u2', 'orig', %d);", i, i)
		fmt.Fprintf(&setup, "INSERT INTO app.tasks VALUES (%d, 'p%d', 'task');", i, 1+i%2)
	}
	e := newSyncEnv(t, setup.String())
	e.connect(t, "u1", "c1")

	var writes atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewSource(42))
		ctx := context.Background()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			var sql string
			// The writer touches docs d000..d099, o000..o029, its own w* docs and
			// both projects; d100..d149 are left to the test.
			d := fmt.Sprintf("d%03d", rng.Intn(100))
			switch rng.Intn(7) {
			case 0:
				sql = fmt.Sprintf("INSERT INTO app.docs (id, owner_id, title) VALUES ('w%05d', 'u%d', 'new')", n, 1+rng.Intn(2))
			case 1:
				sql = fmt.Sprintf("UPDATE app.docs SET title = 'w%d', n = %d WHERE id = '%s'", n, n, d)
			case 2:
				sql = fmt.Sprintf("DELETE FROM app.docs WHERE id = '%s' OR id = 'w%05d'", d, rng.Intn(n+1))
			case 3:
				sql = fmt.Sprintf("UPDATE app.docs SET owner_id = CASE owner_id WHEN 'u1' THEN 'u2' ELSE 'u1' END WHERE id IN ('%s', 'o%03d')", d, rng.Intn(30))
			case 4:
				sql = fmt.Sprintf("UPDATE app.projects SET owner_id = CASE owner_id WHEN 'u1' THEN 'u2' ELSE 'u1' END WHERE id = 'p%d'", 1+rng.Intn(2))
			case 5:
				sql = fmt.Sprintf(`INSERT INTO app.docs (id, owner_id, title) VALUES ('%s', 'u1', 'again') ON CONFLICT (id) DO UPDATE SET title = 'upserted';
					UPDATE app.tasks SET title = 't%d' WHERE id = %d`, d, n, rng.Intn(30))
			case 6:
				sql = fmt.Sprintf(`UPDATE app.docs SET n = coalesce(n, 0) + 1 WHERE id = '%s';
					UPDATE app.docs SET owner_id = 'u2' WHERE id = '%s'; UPDATE app.docs SET owner_id = 'u1' WHERE id = '%s'`, d, d, d)
			}
			if _, err := e.d.Pool.Exec(ctx, sql); err != nil {
				errs <- fmt.Errorf("writer: %q: %w", sql, err)
				return
			}
			writes.Add(1)
		}
	}()
	stopWriter := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	defer stopWriter()
	writerProgress := func(what string, atLeast int64) {
		waitFor(t, what, 30*time.Second, func() (bool, error) {
			select {
			case err := <-errs:
				return false, err
			default:
			}
			return writes.Load() >= atLeast, nil
		})
	}
	writerProgress("the writer's first writes", 10)

	// A mark of what the test changes after the first page: d148 is updated,
	// d149 deleted and d150 inserted, all in user:u1.
	var movedOn string
	pagesSeen := 0
	r := newReplica()
	e.pagingRebuild(t, "u1", "c1", "user:u1", 3, r, func(page int) {
		pagesSeen = page + 1
		switch page {
		case 0:
			movedOn = materializedLSN(t, e)
			c := commitTxn(t, e.d, `UPDATE app.docs SET title = 'changed' WHERE id = 'd148';
				DELETE FROM app.docs WHERE id = 'd149';
				INSERT INTO app.docs (id, owner_id, title) VALUES ('d150', 'u1', 'late')`)
			waitFor(t, "the test's change mid-rebuild materialized", 30*time.Second, func() (bool, error) {
				n := queryInt(t, e.d, `SELECT count(*) FROM synchro.fence f WHERE f.fence_id = ANY ($1::uuid[]) AND EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)`, c.fences)
				return n == int64(len(c.fences)), nil
			})
		case 5:
			// Let the writer change more while the rebuild is half way.
			writerProgress("writes during the rebuild", writes.Load()+20)
		}
	})
	if pagesSeen < 6 {
		t.Fatalf("the rebuild had only %d pages", pagesSeen+1)
	}
	if got := materializedLSN(t, e); got == movedOn {
		t.Fatal("materialization did not move during the rebuild")
	}
	rows := r.rows["user:u1"]
	if row, ok := rows[rowKey("docs", map[string]any{"id": "d149"})]; !ok || row.Row["title"] != "orig" {
		t.Fatalf("d149, deleted after the first page, is missing or changed in the rebuild: %v %v", ok, row.Row)
	}
	if row, ok := rows[rowKey("docs", map[string]any{"id": "d148"})]; !ok || row.Row["title"] != "orig" {
		t.Fatalf("d148, updated after the first page, is missing or changed in the rebuild: %v %v", ok, row.Row)
	}
	if _, ok := rows[rowKey("docs", map[string]any{"id": "d150"})]; ok {
		t.Fatal("d150, inserted after the first page, appears in the rebuild")
	}
	// Every record is a version at or before the position where materialization
	// stood after the first page, so none was created later.
	for k, row := range rows {
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.row_version WHERE version = $1 AND commit_lsn <= $2::pg_lsn`,
			row.Version, movedOn); n != 1 {
			t.Fatalf("rebuild record %s has version %s, not one at or before %s", k, row.Version, movedOn)
		}
	}
	stopWriter()
	waitMaterialized(t, e.d)
	if writes.Load() < 30 {
		t.Fatalf("the writer wrote only %d times", writes.Load())
	}
	e.pagingPull(t, "u1", "c1", 50, r)
	e.requireConverged(t, r, "user:u1")
	if got, want := r.checksum("user:u1"), serverChecksum(t, e, "user:u1"); got != want {
		t.Fatalf("replica checksum %s, server %s", got, want)
	}
	for k, row := range r.rows["user:u1"] {
		if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.synced_row s JOIN synchro.synced_table t ON t.table_id = s.table_id
			WHERE s.version = $1`, row.Version); n != 1 {
			t.Fatalf("replica row %s holds version %s, not the current one", k, row.Version)
		}
	}
}

// TestSyncReadYourWrites: after each push, a pull (which waits for the push's
// capture) delivers the change with exactly the pushed server_version; twenty
// compare-and-swap updates in a row, each on the previous version, all succeed
// and the client converges; a stale base_version is a conflict.
func TestSyncReadYourWrites(t *testing.T) {
	e := newSyncEnv(t, "")
	e.connect(t, "u1", "c1")
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 100, r)
	pk := map[string]any{"id": "r1"}
	key := rowKey("docs", pk)

	resp := e.push(t, "u1", "c1", mut("m0", "docs", "insert", pk, map[string]any{"owner_id": "u1", "title": "v0", "n": 0}))
	list, o := outcome(t, resp, "m0")
	if list != "accepted" {
		t.Fatalf("insert: %v", o)
	}
	version := o["server_version"].(string)
	var versions []string
	for i := 0; i <= 20; i++ {
		if i > 0 {
			id := fmt.Sprintf("m%d", i)
			resp := e.push(t, "u1", "c1", map[string]any{"mutation_id": id, "table": "docs", "op": "update", "pk": pk,
				"base_version": version, "columns": map[string]any{"title": fmt.Sprintf("v%d", i), "n": i}})
			list, o := outcome(t, resp, id)
			if list != "accepted" {
				t.Fatalf("update %d on the pulled version: %v", i, o)
			}
			version = o["server_version"].(string)
		}
		versions = append(versions, version)
		got, _ := e.pagingPull(t, "u1", "c1", 500, r)
		want := pagingDelivery("user:u1", "docs", pk, "upsert", version)
		if len(got) != 1 || got[0] != want {
			t.Fatalf("pull after push %d delivered %v, want [%s]", i, got, want)
		}
		row := r.rows["user:u1"][key]
		if row.Version != version || row.Row["n"] != float64(i) || row.Row["title"] != fmt.Sprintf("v%d", i) {
			t.Fatalf("after push %d the replica holds %v (version %s), pushed version %s", i, row.Row, row.Version, version)
		}
		// Continue from the version the pull delivered.
		version = row.Version
	}
	seen := map[string]bool{}
	for _, v := range versions {
		if seen[v] {
			t.Fatalf("server version %s was allocated twice: %v", v, versions)
		}
		seen[v] = true
	}
	e.requireConverged(t, r, "user:u1")

	resp = e.push(t, "u1", "c1", map[string]any{"mutation_id": "stale", "table": "docs", "op": "update", "pk": pk,
		"base_version": versions[10], "columns": map[string]any{"title": "stale"}})
	if list, o := outcome(t, resp, "stale"); list != "rejected" || o["code"] != "version_conflict" || o["server_version"] != version {
		t.Fatalf("update on a stale version: %s %v", list, o)
	}
	resp = e.push(t, "u1", "c1", map[string]any{"mutation_id": "cas", "table": "docs", "op": "delete", "pk": pk,
		"base_version": r.rows["user:u1"][key].Version})
	if list, o := outcome(t, resp, "cas"); list != "accepted" {
		t.Fatalf("delete on the pulled version: %v", o)
	}
	got, _ := e.pagingPull(t, "u1", "c1", 500, r)
	if want := pagingDelivery("user:u1", "docs", pk, "delete", ""); len(got) != 1 || got[0] != want {
		t.Fatalf("pull after the delete delivered %v, want [%s]", got, want)
	}
	e.requireConverged(t, r, "user:u1")
	if r.checksum("user:u1") != "0" {
		t.Fatalf("empty scope checksum %s", r.checksum("user:u1"))
	}
}

// TestSyncMultiScopeRows: a note with members u1 and u2 is in both user scopes
// with the same version; removing member u2 deletes it from user:u2 only (no
// change in user:u1); a client of u1 holding user:u1 and templates_public keeps
// correct checksums for both through changes to both.
func TestSyncMultiScopeRows(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.notes VALUES ('n1', 'shared'), ('n2', 'only u2');
		INSERT INTO app.note_members (note_id, user_id) VALUES ('n1', 'u1'), ('n1', 'u2'), ('n2', 'u2');
		INSERT INTO app.templates VALUES (1, 'welcome')`)
	n1 := rowKey("notes", map[string]any{"id": "n1"})
	e.connect(t, "u1", "a")
	e.connect(t, "u2", "b")
	ra, rb := newReplica(), newReplica()
	e.rebuildScope(t, "u1", "a", "user:u1", 1, ra)
	e.rebuildScope(t, "u1", "a", "templates_public", 1, ra)
	e.rebuildScope(t, "u2", "b", "user:u2", 1, rb)
	a, okA := ra.rows["user:u1"][n1]
	b, okB := rb.rows["user:u2"][n1]
	if !okA || !okB {
		t.Fatalf("n1 in user:u1 %v, in user:u2 %v", okA, okB)
	}
	if a.Version != b.Version || a.Checksum != b.Checksum || mustMarshal(t, a.Row) != mustMarshal(t, b.Row) {
		t.Fatalf("n1 differs between scopes: %v / %v", a, b)
	}
	if len(ra.rows["user:u1"]) != 1 || len(rb.rows["user:u2"]) != 2 {
		t.Fatalf("user:u1 holds %d rows, user:u2 %d", len(ra.rows["user:u1"]), len(rb.rows["user:u2"]))
	}

	e.d.Exec(t, `DELETE FROM app.note_members WHERE note_id = 'n1' AND user_id = 'u2'`)
	waitMaterialized(t, e.d)
	gotA, _ := e.pagingPull(t, "u1", "a", 1, ra)
	gotB, _ := e.pagingPull(t, "u2", "b", 1, rb)
	if len(gotA) != 0 {
		t.Fatalf("removing member u2 changed user:u1: %v", gotA)
	}
	if want := pagingDelivery("user:u2", "notes", map[string]any{"id": "n1"}, "delete", ""); len(gotB) != 1 || gotB[0] != want {
		t.Fatalf("removing member u2: user:u2 got %v, want [%s]", gotB, want)
	}
	if _, ok := ra.rows["user:u1"][n1]; !ok {
		t.Fatal("n1 left user:u1")
	}
	for _, c := range []struct {
		r     *replica
		scope string
	}{{ra, "user:u1"}, {ra, "templates_public"}, {rb, "user:u2"}} {
		e.requireConverged(t, c.r, c.scope)
	}

	e.d.Exec(t, `UPDATE app.notes SET title = 'renamed' WHERE id IN ('n1', 'n2');
		INSERT INTO app.templates VALUES (2, 'two'); UPDATE app.templates SET name = 'hi' WHERE id = 1`)
	e.d.Exec(t, `INSERT INTO app.note_members (note_id, user_id) VALUES ('n2', 'u1')`)
	waitMaterialized(t, e.d)
	gotA, _ = e.pagingPull(t, "u1", "a", 2, ra)
	gotB, _ = e.pagingPull(t, "u2", "b", 2, rb)
	if len(gotA) != 4 {
		t.Fatalf("u1 got %v, want the renamed n1, two template changes and n2 joining", gotA)
	}
	if len(gotB) != 1 || !strings.Contains(gotB[0], `notes/{"id":"n2"}|upsert|`) {
		t.Fatalf("u2 got %v, want only the renamed n2", gotB)
	}
	for _, c := range []struct {
		r     *replica
		scope string
	}{{ra, "user:u1"}, {ra, "templates_public"}, {rb, "user:u2"}} {
		e.requireConverged(t, c.r, c.scope)
		if got, want := c.r.checksum(c.scope), serverChecksum(t, e, c.scope); got != want {
			t.Fatalf("%s: replica checksum %s, server %s", c.scope, got, want)
		}
	}
	if ra.rows["user:u1"][n1].Row["title"] != "renamed" || len(ra.rows["user:u1"]) != 2 || len(ra.rows["templates_public"]) != 2 {
		t.Fatalf("u1 replica: %s", mustMarshal(t, ra.rows))
	}
	// Both scopes hold n2 at the same version.
	n2 := rowKey("notes", map[string]any{"id": "n2"})
	if ra.rows["user:u1"][n2].Version != rb.rows["user:u2"][n2].Version {
		t.Fatalf("n2: version %s in user:u1, %s in user:u2", ra.rows["user:u1"][n2].Version, rb.rows["user:u2"][n2].Version)
	}
}

// TestSyncScopeSetChange: a shared scope registered while a client syncs is
// listed in the next pull's scope_updates.add with cursor null and a moved
// scope_set_version; it gets no changes until rebuilt; after a rebuild it pulls
// incrementally with its checksum like the other scopes.
func TestSyncScopeSetChange(t *testing.T) {
	e := newSyncEnv(t, `CREATE TABLE app.news (id integer PRIMARY KEY, headline text);
		SELECT synchro.register_table('app.news', '{"kind":"shared","scope":"news"}', '{"push_policy":"read_only"}');
		INSERT INTO app.news VALUES (1, 'one'), (2, 'two');
		INSERT INTO app.templates VALUES (1, 'welcome')`)
	conn := e.connect(t, "u1", "c1")
	if mustMarshal(t, conn["scopes"]) != `{"add":[{"cursor":null,"id":"templates_public"},{"cursor":null,"id":"user:u1"}],"remove":[]}` {
		t.Fatalf("connect scopes: %s", mustMarshal(t, conn["scopes"]))
	}
	r := newReplica()
	for _, s := range []string{"templates_public", "user:u1"} {
		e.rebuildScope(t, "u1", "c1", s, 10, r)
	}
	_, pages := e.pagingPull(t, "u1", "c1", 10, r)
	last := pages[len(pages)-1]
	if got := mustMarshal(t, last["scope_updates"]); got != `{"add":[],"remove":[]}` {
		t.Fatalf("scope_updates before the change: %s", got)
	}
	version := last["scope_set_version"].(float64)

	e.d.Exec(t, `SELECT synchro.register_shared_scope('news')`)
	_, pages = e.pagingPull(t, "u1", "c1", 10, r)
	last = pages[len(pages)-1]
	if got := mustMarshal(t, last["scope_updates"]); got != `{"add":[{"cursor":null,"id":"news"}],"remove":[]}` {
		t.Fatalf("scope_updates after registering news: %s", got)
	}
	if got := last["scope_set_version"].(float64); got != version+1 {
		t.Fatalf("scope_set_version %v after the change, was %v", got, version)
	}
	for _, p := range pages {
		for _, c := range p["changes"].([]any) {
			if c.(map[string]any)["scope"] == "news" {
				t.Fatalf("news delivered a change before its rebuild: %v", c)
			}
		}
	}
	// Asking with a null cursor puts it in rebuild.
	r.cursors["news"] = nil
	body := requireOK(t, "pull", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "scopes": map[string]any{
		"news": map[string]any{"cursor": nil}, "user:u1": map[string]any{"cursor": r.cursors["user:u1"]}}}))
	if got := mustMarshal(t, body["rebuild"]); got != `["news"]` {
		t.Fatalf("rebuild %s for news with a null cursor", got)
	}
	if _, ok := body["scope_cursors"].(map[string]any)["news"]; ok {
		t.Fatalf("news got a cursor with a null cursor: %s", body["scope_cursors"])
	}

	final := e.rebuildScope(t, "u1", "c1", "news", 1, r)
	if len(r.rows["news"]) != 2 || final["checksum"] == "0" {
		t.Fatalf("news rebuild: %s, checksum %v", mustMarshal(t, r.rows["news"]), final["checksum"])
	}
	e.d.Exec(t, `INSERT INTO app.news VALUES (3, 'three'); UPDATE app.news SET headline = 'uno' WHERE id = 1;
		DELETE FROM app.news WHERE id = 2; INSERT INTO app.templates VALUES (2, 'two')`)
	waitMaterialized(t, e.d)
	got, pages := e.pagingPull(t, "u1", "c1", 1, r)
	if len(got) != 4 {
		t.Fatalf("pull after the news changes delivered %v", got)
	}
	last = pages[len(pages)-1]
	if got := mustMarshal(t, last["scope_updates"]); got != `{"add":[],"remove":[]}` {
		t.Fatalf("scope_updates once news is held: %s", got)
	}
	if got := last["scope_set_version"].(float64); got != version+1 {
		t.Fatalf("scope_set_version moved to %v without a change", got)
	}
	if _, ok := last["checksums"].(map[string]any)["news"]; !ok {
		t.Fatal("no checksum for news")
	}
	for _, s := range []string{"news", "templates_public", "user:u1"} {
		e.requireConverged(t, r, s)
	}
}

// TestSyncChecksumsOnlyOnFinalPage: pages with has_more true carry no checksums;
// the final page carries one for every scope served, changed or not (an empty
// scope's checksum is "0"), also when it delivers nothing; a scope asked with a
// null cursor is in rebuild instead.
func TestSyncChecksumsOnlyOnFinalPage(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.templates VALUES (1, 'welcome'), (2, 'two')`)
	e.connect(t, "u1", "c1")
	e.connect(t, "u3", "c3")
	r1, r3 := newReplica(), newReplica()
	for _, s := range []string{"templates_public", "user:u1"} {
		e.rebuildScope(t, "u1", "c1", s, 1, r1)
	}
	for _, s := range []string{"templates_public", "user:u3"} {
		e.rebuildScope(t, "u3", "c3", s, 1, r3)
	}
	if got := r3.checksum("user:u3"); got != "0" {
		t.Fatalf("empty scope checksum %s", got)
	}
	for i := 0; i < 9; i++ {
		e.d.Exec(t, fmt.Sprintf(`INSERT INTO app.docs (id, owner_id, title) VALUES ('d%d', 'u1', 'x')`, i))
	}
	waitMaterialized(t, e.d)

	got, pages := e.pagingPull(t, "u1", "c1", 2, r1)
	if len(got) != 9 || len(pages) != 5 {
		t.Fatalf("9 changes with limit 2: %d changes in %d pages", len(got), len(pages))
	}
	for i, p := range pages {
		_, has := p["checksums"]
		if has != (i == len(pages)-1) {
			t.Fatalf("page %d of %d: checksums present %v", i, len(pages), has)
		}
	}
	final := pages[len(pages)-1]["checksums"].(map[string]any)
	if len(final) != 2 || final["templates_public"] != serverChecksum(t, e, "templates_public") || final["user:u1"] != serverChecksum(t, e, "user:u1") {
		t.Fatalf("final checksums %s", mustMarshal(t, final))
	}

	// u3 has nothing new: one final page with both checksums.
	got, pages = e.pagingPull(t, "u3", "c3", 2, r3)
	if len(got) != 0 || len(pages) != 1 {
		t.Fatalf("u3: %v in %d pages", got, len(pages))
	}
	if c := pages[0]["checksums"].(map[string]any); c["user:u3"] != "0" || c["templates_public"] != final["templates_public"] {
		t.Fatalf("u3 checksums %s", mustMarshal(t, c))
	}

	// A scope asked with a null cursor is in rebuild, served scopes keep theirs.
	body := requireOK(t, "pull", e.post(t, "u1", "/sync/pull", map[string]any{"client_id": "c1", "limit": 2, "scopes": map[string]any{
		"templates_public": map[string]any{"cursor": nil}, "user:u1": map[string]any{"cursor": r1.cursors["user:u1"]}}}))
	if mustMarshal(t, body["rebuild"]) != `["templates_public"]` || body["has_more"] != false {
		t.Fatalf("pull with a null cursor: %s", body)
	}
	c := body["checksums"].(map[string]any)
	if c["user:u1"] != final["user:u1"] {
		t.Fatalf("checksums with a scope in rebuild: %s", mustMarshal(t, c))
	}
	var keys []string
	for k := range body["scope_cursors"].(map[string]any) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "user:u1" {
		t.Fatalf("cursors for %v with templates_public in rebuild", keys)
	}
}

// TestSyncSamePositionInTwoScopes: one client holds user:u1 and user:u2 (a
// scope assignment function), so one event has effects at the same position in
// both scopes of one pull (a shared note renamed; a project moving its tasks
// from one scope to the other). Pulls with limit 1, 2, 3 and 500 deliver the
// same changes in (position, scope) order, each exactly once, and converge.
func TestSyncSamePositionInTwoScopes(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO app.projects VALUES ('p1', 'u1');
		INSERT INTO app.tasks VALUES (1, 'p1', 'a'), (2, 'p1', 'b');
		INSERT INTO app.notes VALUES ('n1', 'one'), ('n2', 'two');
		INSERT INTO app.note_members (note_id, user_id) VALUES ('n1', 'u1'), ('n1', 'u2'), ('n2', 'u1'), ('n2', 'u2');
		CREATE FUNCTION app.paging_assign(u text) RETURNS SETOF text LANGUAGE sql STABLE
			AS $$ SELECT 'user:u1' WHERE u = 'boss' UNION ALL SELECT 'user:u2' WHERE u = 'boss' $$;
		SELECT synchro.set_scope_assignment('app.paging_assign(text)')`)
	scopes := []string{"user:u1", "user:u2"}
	limits := []int{1, 2, 3, 500}
	replicas := map[int]*replica{}
	for _, limit := range limits {
		client := fmt.Sprintf("boss-%d", limit)
		conn := e.connect(t, "boss", client)
		if got := mustMarshal(t, conn["scopes"]); got != `{"add":[{"cursor":null,"id":"user:u1"},{"cursor":null,"id":"user:u2"}],"remove":[]}` {
			t.Fatalf("connect scopes %s", got)
		}
		r := newReplica()
		for _, s := range scopes {
			e.rebuildScope(t, "boss", client, s, 1000, r)
		}
		replicas[limit] = r
	}
	since := materializedLSN(t, e)
	commitTxn(t, e.d, `UPDATE app.notes SET title = 'renamed' WHERE id IN ('n1', 'n2');
		UPDATE app.projects SET owner_id = 'u2' WHERE id = 'p1'`)
	commitTxn(t, e.d, `UPDATE app.projects SET owner_id = 'u1' WHERE id = 'p1';
		UPDATE app.notes SET title = 'again' WHERE id = 'n1'`)
	waitMaterialized(t, e.d)
	if n := queryInt(t, e.d, `SELECT count(*) FROM (SELECT FROM synchro.effect WHERE commit_lsn > $1::pg_lsn
		GROUP BY commit_lsn, event_ordinal, effect_ordinal HAVING count(*) = 2) x`, since); n < 5 {
		t.Fatalf("only %d positions have effects in both scopes", n)
	}
	want := expectedEffects(t, e, since, scopes...)
	if len(want) != 14 {
		t.Fatalf("%d effects, want 14: %v", len(want), want)
	}
	for _, limit := range limits {
		got, _ := e.pagingPull(t, "boss", fmt.Sprintf("boss-%d", limit), limit, replicas[limit])
		requireSameList(t, fmt.Sprintf("limit %d", limit), got, want)
		for _, s := range scopes {
			e.requireConverged(t, replicas[limit], s)
		}
	}
}
