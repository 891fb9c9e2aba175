package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/peterldowns/pgtestdb"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/migrate"
)

// EnvURL names the variable holding the test cluster's URL.
const EnvURL = "SYNCHRO_TEST_DATABASE_URL"

// DB is one test database.
type DB struct {
	Pool *pgxpool.Pool
	URL  string
	Name string
}

// New creates a fresh database migrated with Synchro's schema and function
// bundle (publication "synchro") and closes it when the test ends.
func New(t testing.TB) *DB {
	t.Helper()
	return newOn(t, BaseURL(t), migrator{})
}

// NewAt is New on the cluster at baseURL rather than the test cluster: for a
// test that changes server-wide settings on a throwaway cluster of its own.
func NewAt(t testing.TB, baseURL string) *DB {
	t.Helper()
	// pgtestdb remembers for the whole test binary that it made the template of
	// a migrator hash, on whichever cluster: another cluster needs another hash.
	return newOn(t, baseURL, migrator{cluster: baseURL})
}

func newOn(t testing.TB, baseURL string, m migrator) *DB {
	t.Helper()
	inst := pgtestdb.Custom(t, configFor(t, baseURL), m)
	pool, err := pgxpool.New(context.Background(), inst.URL())
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return &DB{Pool: pool, URL: inst.URL(), Name: inst.Database}
}

// Empty creates a fresh database with nothing of Synchro in it.
func Empty(t testing.TB) *DB {
	t.Helper()
	inst := pgtestdb.Custom(t, configFor(t, BaseURL(t)), pgtestdb.NoopMigrator{})
	pool, err := pgxpool.New(context.Background(), inst.URL())
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return &DB{Pool: pool, URL: inst.URL(), Name: inst.Database}
}

// BaseURL is the test cluster's URL; the test fails when it is not configured.
func BaseURL(t testing.TB) string {
	t.Helper()
	raw := os.Getenv(EnvURL)
	if raw == "" {
		t.Fatalf("testdb: %s is not set; run the tests with `make test`, which starts a PostgreSQL cluster", EnvURL)
	}
	return raw
}

func configFor(t testing.TB, baseURL string) pgtestdb.Config {
	t.Helper()
	u, err := url.Parse(baseURL)
	if err != nil {
		t.Fatalf("testdb: parse %s: %v", baseURL, err)
	}
	pw, _ := u.User.Password()
	role := pgtestdb.Role{Username: u.User.Username(), Password: pw, Capabilities: "SUPERUSER REPLICATION"}
	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       u.Hostname(),
		Port:       u.Port(),
		User:       u.User.Username(),
		Password:   pw,
		Database:   strings.TrimPrefix(u.Path, "/"),
		Options:    u.RawQuery,
		TestRole:   &role,
		// Replication connections of a test worker may outlive the test by a moment.
		ForceTerminateConnections: true,
	}
}

// migrator migrates a template database; cluster (empty for the test
// cluster) tells the templates of other clusters apart.
type migrator struct{ cluster string }

func (m migrator) Hash() (string, error) {
	if m.cluster == "" {
		return migrate.BuildHash(), nil
	}
	return migrate.BuildHash() + " on " + m.cluster, nil
}

func (migrator) Migrate(ctx context.Context, db *sql.DB, _ pgtestdb.Config) error {
	_, err := migrate.ApplyDB(ctx, db, "synchro", slog.New(slog.NewTextHandler(io.Discard, nil)))
	return err
}

var slotSeq atomic.Int64

// CreateSlot creates a pgoutput logical replication slot in the test database
// and drops it when the test ends. Slot names are unique across the cluster.
func (d *DB) CreateSlot(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t_%s_%d", strings.ReplaceAll(strings.ToLower(d.Name), "-", "_"), slotSeq.Add(1))
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	ctx := context.Background()
	if _, err := d.Pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name); err != nil {
		t.Fatalf("testdb: create slot: %v", err)
	}
	t.Cleanup(func() { d.DropSlot(t, name) })
	return name
}

// DropSlot drops a slot of the test database, waiting (with a deadline) for a
// consumer to let go of it.
func (d *DB) DropSlot(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := d.Pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database() AND NOT active`, name)
		var exists bool
		if err == nil {
			// Only this database's: once dropped, a worker of another database
			// may create a slot of the same name at once (slot names are
			// cluster-wide).
			err = d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_replication_slots
				WHERE slot_name = $1 AND database = current_database())`, name).Scan(&exists)
		}
		if err == nil && !exists {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("testdb: slot %s still exists: %v", name, err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Decode consumes every change now in the slot through pgoutput (protocol 1,
// publication "synchro", messages on) and returns the committed transactions,
// every row event loaded (all its columns decoded).
func (d *DB) Decode(t testing.TB, slot string) []*capture.Txn {
	t.Helper()
	rows, err := d.Pool.Query(context.Background(), `
		SELECT data FROM pg_logical_slot_get_binary_changes($1, NULL, NULL,
			'proto_version', '1', 'publication_names', 'synchro', 'messages', 'true')`, slot)
	if err != nil {
		t.Fatalf("testdb: decode slot %s: %v", slot, err)
	}
	defer rows.Close()
	asm := capture.NewAssembler()
	var txns []*capture.Txn
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			t.Fatalf("testdb: decode slot %s: %v", slot, err)
		}
		txn, err := asm.Feed(data)
		if err != nil {
			t.Fatalf("testdb: decode slot %s: %v", slot, err)
		}
		if txn != nil {
			for i := range txn.Rows {
				if err := txn.Load(&txn.Rows[i]); err != nil {
					t.Fatalf("testdb: decode slot %s: %v", slot, err)
				}
			}
			txns = append(txns, txn)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("testdb: decode slot %s: %v", slot, err)
	}
	return txns
}

// Exec runs SQL statements, failing the test on error.
func (d *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := d.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("testdb: exec %q: %v", sql, err)
	}
}

// ExecErr runs SQL and returns its error (nil on success).
func (d *DB) ExecErr(sql string, args ...any) error {
	_, err := d.Pool.Exec(context.Background(), sql, args...)
	return err
}

// Resolver resolves row events against the registry as it is now (every
// registration, whatever its generation), as the worker reads it
// (db.LoadRegistry).
func (d *DB) Resolver(t testing.TB) capture.Resolver {
	t.Helper()
	rows, err := db.New(d.Pool).LoadRegistry(context.Background())
	if err != nil {
		t.Fatalf("testdb: load registry: %v", err)
	}
	regs := map[uint32]capture.Registered{}
	for _, row := range rows {
		r := capture.RegisteredOf(row)
		regs[r.Relation.OID] = r
	}
	return func(_ int, oid uint32) (capture.Registered, bool) {
		r, ok := regs[oid]
		return r, ok
	}
}
