package tests

import (
	"context"
	"database/sql"
	"testing"
)

// stampedSchema is a synced table whose server fills a NOT NULL column by its
// default (stamped_at) and one that it does not fill (title).
const stampedSchema = `
CREATE TABLE app.stamped (id text PRIMARY KEY, owner_id text NOT NULL, title text NOT NULL,
    stamped_at timestamptz NOT NULL DEFAULT now());
SELECT synchro.register_table('app.stamped', '{"kind":"column","template":"user:{owner_id}"}');
`

// TestClientInsertLeavesServerDefaultsOut: a local insert that leaves out a
// column the server fills with its default (NOT NULL there) is accepted by the
// replica, pushed without the column, applied, and the local row takes the
// value the server filled in. One that leaves out a NOT NULL column the server
// has no default for is refused (validation_failed) and reverted.
func TestClientInsertLeavesServerDefaultsOut(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, stampedSchema)
	c := openClient(t, e, t.TempDir(), "u1", "stamped-1")
	c.sync(t)

	c.exec(t, `INSERT INTO stamped (id, owner_id, title) VALUES ('s1', 'u1', 'first')`)
	c.exec(t, `INSERT INTO stamped (id, owner_id) VALUES ('s2', 'u1')`)
	rep := c.sync(t)
	if rep.Pushed != 1 || rep.Rejected != 1 || rep.Pending != 0 {
		t.Fatalf("sync report %+v; want 1 pushed (s1), 1 rejected (s2)", rep)
	}

	var serverStamp string
	if err := e.d.Pool.QueryRow(context.Background(),
		`SELECT to_char(stamped_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') FROM app.stamped WHERE id = 's1'`).Scan(&serverStamp); err != nil {
		t.Fatalf("s1 on the server: %v", err)
	}
	var localStamp sql.NullString
	if err := c.DB().QueryRow(`SELECT stamped_at FROM stamped WHERE id = 's1'`).Scan(&localStamp); err != nil {
		t.Fatalf("s1 locally: %v", err)
	}
	if !localStamp.Valid || len(localStamp.String) < len(serverStamp) || localStamp.String[:len(serverStamp)] != serverStamp {
		t.Fatalf("local s1 stamped_at %v; want the server's %s", localStamp, serverStamp)
	}

	var n int
	if err := c.DB().QueryRow(`SELECT count(*) FROM stamped WHERE id = 's2'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("s2 locally: %d rows (%v); want it reverted", n, err)
	}
	rejections, err := c.Rejections(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rejections) != 1 || rejections[0].Code != "validation_failed" {
		t.Fatalf("rejections %+v; want s2's validation_failed", rejections)
	}
	settle(t, e, c)
	requireScopes(t, e, c)
}
