package tests

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// asRole runs sql inside a transaction as role and returns its error.
func asRole(t *testing.T, d *testdb.DB, role, sql string) error {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, sql)
	return err
}

// loginAs creates a login role (dropped when the test ends) that is a member of
// role only, as a DBA would create for an operator or a service, and returns the
// URL of the test database for it.
func loginAs(t *testing.T, d *testdb.DB, role string) string {
	t.Helper()
	login := strings.ToLower(fmt.Sprintf("%s_%s", role, strings.ReplaceAll(d.Name, "-", "_")))
	if len(login) > 63 {
		login = login[len(login)-63:]
	}
	ident := pgx.Identifier{login}.Sanitize()
	d.Exec(t, fmt.Sprintf(`CREATE ROLE %s LOGIN IN ROLE %s`, ident, pgx.Identifier{role}.Sanitize()))
	t.Cleanup(func() {
		if err := d.ExecErr(`DROP OWNED BY ` + ident + `; DROP ROLE ` + ident); err != nil {
			t.Errorf("drop role %s: %v", login, err)
		}
	})
	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(login)
	return u.String()
}

func TestOperatorFunctionsAreNotCallableByTheServiceRole(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.docs (id int PRIMARY KEY)`)
	operatorOnly := []string{
		`SELECT synchro.retry_poison(1)`,
		`SELECT * FROM synchro.poison`,
		`SELECT * FROM synchro.history_status()`,
		`SELECT * FROM synchro.storage_status()`,
	}
	for _, sql := range operatorOnly {
		if err := asRole(t, d, "synchro_service", sql); sqlState(err) != "42501" {
			t.Errorf("service role ran %q: %v", sql, err)
		}
		if err := asRole(t, d, "synchro_operator", sql); err != nil {
			t.Errorf("operator role cannot run %q: %v", sql, err)
		}
	}
	// Registration, worker and materialization functions are callable by neither.
	for _, sql := range []string{
		`SELECT synchro.register_table('app.docs', '{"kind":"shared","scope":"s"}')`,
		`SELECT synchro.register_dependency('app.docs')`,
		`SELECT synchro.guard_partitions()`,
		`SELECT synchro.detach_partition('app.docs')`,
		`SELECT synchro.forget_lost_partition('app.docs')`,
		`SELECT synchro.accept_rewrite('app.docs')`,
		`SELECT synchro.accept_partition_guards('app.docs')`,
		`SELECT synchro.record_storage()`,
		`SELECT synchro.record_enum_labels()`,
		`SELECT synchro.record_decoded_enum_labels()`,
		`SELECT synchro.materialize_transaction('[]')`,
		`SELECT synchro.record_acknowledgement('0/0')`,
		`SELECT synchro.prune_capture_history('0', 1)`,
		`SELECT synchro.prune_history('0', 1, now())`,
		`SELECT synchro.quarantine('0/1', '0/2', 1, 'decode_error', NULL, NULL)`,
	} {
		for _, role := range []string{"synchro_service", "synchro_operator"} {
			if err := asRole(t, d, role, sql); sqlState(err) != "42501" {
				t.Errorf("%s ran %q: %v", role, sql, err)
			}
		}
	}
}

// TestOperatorCannotReadSyncedRows: synchro.synced_row carries row data (keys, and a
// checksum over key and image that confirms guessed values), so the operator role
// cannot read it, and migrating a database that once granted it takes the grant away.
func TestOperatorCannotReadSyncedRows(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sql := `SELECT * FROM synchro.synced_row`
	for _, role := range []string{"synchro_operator", "synchro_service"} {
		if err := asRole(t, d, role, sql); sqlState(err) != "42501" {
			t.Errorf("%s ran %q: %v", role, sql, err)
		}
	}
	// A database migrated by a build that granted it: reinstalling the bundle revokes it.
	d.Exec(t, `GRANT SELECT ON synchro.synced_row TO synchro_operator; UPDATE synchro.function_bundle SET digest = 'x'`)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	res, err := migrate.Apply(context.Background(), d.URL, "synchro", log)
	if err != nil {
		t.Fatal(err)
	}
	if !res.BundleChanged {
		t.Fatalf("migrate did not reinstall the bundle: %+v", res)
	}
	if err := asRole(t, d, "synchro_operator", sql); sqlState(err) != "42501" {
		t.Errorf("operator ran %q after migrate: %v", sql, err)
	}
}

// TestOperatorConfiguresProtocol: synchro.configure_protocol is the operator's (it
// writes the settings row as definer, as configure_readiness does); the HTTP
// service role cannot call it.
func TestOperatorConfiguresProtocol(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sql := `SELECT synchro.configure_protocol(2, '1.4.0')`
	if err := asRole(t, d, "synchro_service", sql); sqlState(err) != "42501" {
		t.Errorf("service role ran %q: %v", sql, err)
	}
	ctx := context.Background()
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE synchro_operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatalf("operator role cannot run %q: %v", sql, err)
	}
	if _, err := tx.Exec(ctx, "RESET ROLE"); err != nil {
		t.Fatal(err)
	}
	var proto int
	var app *string
	if err := tx.QueryRow(ctx, `SELECT min_protocol_version, min_app_version FROM synchro.settings`).Scan(&proto, &app); err != nil {
		t.Fatal(err)
	}
	if proto != 2 || app == nil || *app != "1.4.0" {
		t.Errorf("settings after configure_protocol(2, '1.4.0'): %d, %v", proto, app)
	}
}
