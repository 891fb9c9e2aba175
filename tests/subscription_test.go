package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestSubscriptionWritesAreCaptured: a registered table fed by a logical
// replication subscription. Its apply worker writes with
// session_replication_role = replica, where ordinary triggers do not fire;
// Synchro's fire in every session, so every row it applies (insert, update,
// delete) is fenced and captured with its values, and nothing blocks capture.
func TestSubscriptionWritesAreCaptured(t *testing.T) {
	t.Parallel()
	src := testdb.Empty(t)                       // the publisher
	slot := "feed_" + src.Name[len(src.Name)-8:] // unique on the cluster
	src.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.feed (id int PRIMARY KEY, v text); CREATE PUBLICATION feed FOR TABLE app.feed`)
	src.Exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.feed (id int PRIMARY KEY, v text);
		SELECT synchro.register_table('app.feed', '{"kind":"shared","scope":"all"}')`)
	cfg := workerConfig(d, "w1")
	log := logTo(&cfg)
	startStreaming(t, d, cfg)
	// Both databases are on the test cluster: the slot exists already, so
	// creating the subscription does not wait for a slot of its own cluster.
	d.Exec(t, fmt.Sprintf(`CREATE SUBSCRIPTION feed CONNECTION %s PUBLICATION feed
		WITH (create_slot = false, slot_name = '%s', copy_data = false)`, "'"+strings.ReplaceAll(src.URL, "'", "''")+"'", slot))
	t.Cleanup(func() {
		// Also drops the slot on the publisher, before either database goes.
		if _, err := d.Pool.Exec(context.Background(), `DROP SUBSCRIPTION feed`); err != nil {
			t.Errorf("drop subscription: %v", err)
		}
	})

	src.Exec(t, `INSERT INTO app.feed VALUES (1, 'one'), (2, 'two'), (3, 'three')`)
	src.Exec(t, `UPDATE app.feed SET v = 'TWO' WHERE id = 2; DELETE FROM app.feed WHERE id = 3`)
	waitFor(t, "the subscription's writes applied and materialized", 60*time.Second, func() (bool, error) {
		return queryBool(t, d, `SELECT (SELECT count(*) FROM app.feed) = 2 AND (SELECT v FROM app.feed WHERE id = 2) = 'TWO'
			AND NOT EXISTS (SELECT FROM synchro.fence f WHERE NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id))
			AND (SELECT count(*) FROM synchro.fence) = 5`), nil
	})
	requireImage(t, d, "app.feed", "1", `{"id": 1, "v": "one"}`)
	requireImage(t, d, "app.feed", "2", `{"id": 2, "v": "TWO"}`)
	requireImage(t, d, "app.feed", "3", "")
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("%d poison records, want none", n)
	}
	requireEffectVersions(t, d)
	requireDigests(t, d)
	requireRedacted(t, d, log)
}
