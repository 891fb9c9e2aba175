package migrate

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/synchro-sync/synchro/internal/db"
	"github.com/synchro-sync/synchro/internal/dberr"
	sqlfiles "github.com/synchro-sync/synchro/sql"
)

// versionTable is where goose records applied migrations; the function bundle
// triggers on it (sql/functions/bundle/forget_bundle.sql).
const versionTable = "synchro.goose_db_version"

// Result says what Apply changed.
type Result struct {
	Applied       []int64 // migration versions applied by this run
	SchemaVersion int64   // schema version after the run
	BundleChanged bool    // whether the function bundle was (re)installed
	BundleDigest  string
}

// Unchanged reports whether the run changed nothing.
func (r Result) Unchanged() bool { return len(r.Applied) == 0 && !r.BundleChanged }

// ErrStale means the database schema or function bundle differs from this build.
var ErrStale = errors.New("database schema differs from this build of Synchro; run `synchroctl migrate`")

// ErrNoPrivilege means the checking role may not read Synchro's schema version:
// migrating again would change nothing, the role is the wrong one.
var ErrNoPrivilege = errors.New("this database user may not read Synchro's schema; " +
	"run synchrod as the role that ran `synchroctl migrate` (the owner of schema synchro) or a superuser")

// denied reports a permission error (SQLSTATE 42501).
func denied(err error) bool {
	return dberr.SQLState(err) == "42501"
}

// Apply migrates the database at databaseURL and installs the function bundle,
// making publication the capture publication. Running it again changes nothing.
func Apply(ctx context.Context, databaseURL, publication string, log *slog.Logger) (Result, error) {
	// Parsed as a pool's URL, as synchrod parses it: pgx's own settings in it
	// (pool_max_conns) are not the server's, which refuses a connection naming them.
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return Result{}, fmt.Errorf("parse database URL: %w", err)
	}
	sqlDB := stdlib.OpenDB(*cfg.ConnConfig)
	defer sqlDB.Close()
	return ApplyDB(ctx, sqlDB, publication, log)
}

// ApplyDB is Apply over an open database/sql handle.
func ApplyDB(ctx context.Context, sqlDB *sql.DB, publication string, log *slog.Logger) (Result, error) {
	var res Result
	// goose keeps its version table in the synchro schema. Concurrent CREATE
	// SCHEMA IF NOT EXISTS can fail on the catalog's unique index (23505) when
	// deploy jobs start together, so the first one creates it under a lock the
	// others wait for (one statement string: one transaction holds the lock).
	if _, err := sqlDB.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('synchro: create schema')); CREATE SCHEMA IF NOT EXISTS synchro"); err != nil {
		return res, fmt.Errorf("create schema synchro: %w", err)
	}
	provider, err := NewProvider(sqlDB)
	if err != nil {
		return res, err
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return res, fmt.Errorf("apply migrations: %w", err)
	}
	for _, r := range results {
		res.Applied = append(res.Applied, r.Source.Version)
		log.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	if res.SchemaVersion, err = provider.GetDBVersion(ctx); err != nil {
		return res, fmt.Errorf("read schema version: %w", err)
	}

	files, digest, err := bundle(sqlfiles.Functions())
	if err != nil {
		return res, err
	}
	res.BundleDigest = digest
	res.BundleChanged, err = installBundle(ctx, sqlDB, files, digest, publication)
	if err != nil {
		return res, err
	}
	if res.BundleChanged {
		log.Info("function bundle installed", "files", len(files), "digest", digest)
	}
	return res, nil
}

// NewProvider is the goose provider of this build's migrations, over Synchro's
// version table and with goose's session lock, as Apply uses it. Its Down and
// DownTo roll migrations back as the goose command does (docs/operations.md, "Migrations").
func NewProvider(sqlDB *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, sqlDB, sqlfiles.Schema(),
		goose.WithTableName(versionTable), goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
}

// installBundle applies every function file in one transaction when the recorded
// digest differs (or the publication is missing), then records the digest.
func installBundle(ctx context.Context, sqlDB *sql.DB, files []bundleFile, digest, publication string) (bool, error) {
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	// Serialize concurrent installs.
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('synchro.function_bundle'))"); err != nil {
		return false, err
	}
	var current string
	var pubOK bool
	err = tx.QueryRowContext(ctx, `
		SELECT coalesce((SELECT digest FROM synchro.function_bundle), ''),
		       EXISTS (SELECT FROM synchro.settings s JOIN pg_publication p ON p.pubname = s.publication_name
		               WHERE s.publication_name = $1)`, publication).Scan(&current, &pubOK)
	if err != nil {
		return false, fmt.Errorf("read installed bundle: %w", err)
	}
	if current == digest && pubOK {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, "SET LOCAL check_function_bodies = off"); err != nil {
		return false, err
	}
	for _, f := range files {
		if _, err := tx.ExecContext(ctx, f.body); err != nil {
			return false, fmt.Errorf("install %s: %w", f.name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, "SELECT synchro.ensure_publication($1)", publication); err != nil {
		return false, fmt.Errorf("ensure publication %q: %w", publication, err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO synchro.function_bundle (digest) VALUES ($1)
		ON CONFLICT (singleton) DO UPDATE SET digest = EXCLUDED.digest, installed_at = now()`, digest); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// Check returns ErrStale (wrapped with details) unless the database has every
// migration of this build and exactly this build's function bundle.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	want, err := latestVersion()
	if err != nil {
		return err
	}
	// Read-only: no goose provider (it would take the migration lock and create
	// its version table).
	var have int64
	err = pool.QueryRow(ctx, `SELECT CASE WHEN to_regclass('`+versionTable+`') IS NULL THEN -1
		ELSE (SELECT coalesce(max(version_id), 0) FROM `+versionTable+` WHERE is_applied) END`).Scan(&have)
	if err != nil {
		if denied(err) {
			return fmt.Errorf("%w: cannot read the schema version: %v", ErrNoPrivilege, err)
		}
		return fmt.Errorf("%w (cannot read schema version: %v)", ErrStale, err)
	}
	if have < 0 {
		return fmt.Errorf("%w (no Synchro schema in this database)", ErrStale)
	}
	if have != want {
		return fmt.Errorf("%w (database schema version %d, this build needs %d)", ErrStale, have, want)
	}
	digest, err := db.New(pool).GetBundleDigest(ctx)
	if err != nil {
		if denied(err) {
			return fmt.Errorf("%w: cannot read the function bundle digest: %v", ErrNoPrivilege, err)
		}
		return fmt.Errorf("%w (no function bundle installed)", ErrStale)
	}
	if digest != BundleDigest() {
		return fmt.Errorf("%w (installed function bundle %.12s differs from this build's %.12s)", ErrStale, digest, BundleDigest())
	}
	return nil
}

// BuildHash identifies this build's migrations and function bundle together.
func BuildHash() string {
	h := sha256.New()
	names, _ := fs.Glob(sqlfiles.Schema(), "*.sql")
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(sqlfiles.Schema(), n)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	h.Write([]byte(BundleDigest()))
	return hex.EncodeToString(h.Sum(nil))
}

func latestVersion() (int64, error) {
	names, err := fs.Glob(sqlfiles.Schema(), "*.sql")
	if err != nil {
		return 0, err
	}
	var latest int64
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			return 0, err
		}
		latest = max(latest, v)
	}
	return latest, nil
}
