package tests

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/reset"
)

// TestClientAfterStreamReset: SDK replicas rebuild by themselves after a
// stream reset. A replica with a local change queued across the reset pushes
// it and rebuilds every scope in its next Sync; one that syncs only after the
// old generation is retired rebuilds too; both end equal to the server, and
// later changes reach them incrementally.
func TestClientAfterStreamReset(t *testing.T) {
	e := newSyncEnv(t, `
		INSERT INTO app.projects VALUES ('p1', 'u1');
		INSERT INTO app.templates VALUES (1, 'welcome');
		INSERT INTO app.docs (id, owner_id, title, n) VALUES ('d1', 'u1', 'one', 1), ('d2', 'u1', 'two', 2), ('d3', 'u2', 'three', 3);
		INSERT INTO app.tasks VALUES (1, 'p1', 'first');`)
	dropResetSlots(t, e)
	dir := t.TempDir()
	a := openClient(t, e, dir, "u1", "a")
	b := openClient(t, e, dir, "u1", "b")
	settle(t, e, a, b)
	scopes := []string{"templates_public", "user:u1"}

	a.exec(t, `UPDATE docs SET title = 'one, edited before the reset' WHERE id = 'd1'`)
	e.d.Exec(t, `UPDATE app.docs SET title = 'two, server' WHERE id = 'd2'`)
	res, err := reset.Run(context.Background(), resetConfig(e.d, true))
	if err != nil || res.Phase != "activated" {
		t.Fatalf("reset: %v (phase %s)", err, res.Phase)
	}
	e.d.Exec(t, `INSERT INTO app.docs (id, owner_id, title) VALUES ('d4', 'u1', 'after the reset')`)
	waitMaterialized(t, e.d)
	waitCaptureReady(t, e.d)

	rep := a.sync(t)
	slices.Sort(rep.Rebuilt)
	if rep.Pushed != 1 || !slices.Equal(rep.Rebuilt, scopes) {
		t.Fatalf("a: first sync after the reset pushed %d, rebuilt %v; want 1 pushed and %v rebuilt", rep.Pushed, rep.Rebuilt, scopes)
	}
	settle(t, e, a)
	requireReplica(t, e, a)
	if got := a.localString(t, `SELECT title FROM docs WHERE id = 'd1'`); got != "one, edited before the reset" {
		t.Fatalf("a: d1 %q after the reset, want the queued edit", got)
	}

	// b syncs for the first time since the reset once the old generation is
	// retired (its cursors are of a generation that no longer exists).
	waitFor(t, "the worker to leave the old slot", 30*time.Second, func() (bool, error) {
		return !queryBool(t, e.d, `SELECT EXISTS (SELECT FROM synchro.stream_reset r JOIN pg_replication_slots s
			ON s.slot_name = r.source_slot WHERE r.reset_id = $1 AND s.active)`, res.ResetID), nil
	})
	e.d.Exec(t, `SELECT synchro.retire_reset($1)`, res.ResetID)
	rep = b.sync(t)
	slices.Sort(rep.Rebuilt)
	if !slices.Equal(rep.Rebuilt, scopes) {
		t.Fatalf("b: first sync after the retirement rebuilt %v, want %v", rep.Rebuilt, scopes)
	}
	settle(t, e, a, b)
	requireReplica(t, e, a)
	requireReplica(t, e, b)

	// Incremental from the new cursors: a server change arrives by pull.
	e.d.Exec(t, `UPDATE app.docs SET title = 'four, later' WHERE id = 'd4'`)
	waitMaterialized(t, e.d)
	for _, c := range []*sdkClient{a, b} {
		if rep := c.sync(t); rep.Pulled != 1 || len(rep.Rebuilt) != 0 {
			t.Fatalf("%s: sync after a later change pulled %d, rebuilt %v; want 1 change pulled, nothing rebuilt", c.name, rep.Pulled, rep.Rebuilt)
		}
		requireReplica(t, e, c)
	}
}
