package client

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// Config configures a Client.
type Config struct {
	// ServerURL is the base URL of the Synchro server, e.g. http://127.0.0.1:8080.
	ServerURL string
	// ClientID identifies this replica to the server. When empty, the ID stored
	// in the database is used, or a random one is generated and stored. A
	// database stays bound to the client ID it was first synced with.
	ClientID string
	// Platform and AppVersion are reported on connect.
	Platform   string
	AppVersion string
	// Token returns the bearer token of each request (nil: no Authorization
	// header, e.g. behind a trusted-header proxy).
	Token func(ctx context.Context) (string, error)
	// HTTPClient sends the requests; nil means a client with a 60s timeout.
	HTTPClient *http.Client
	// PageSize is the pull and rebuild page size (default 500).
	PageSize int
	// MaxAttempts bounds the attempts of one request on retryable failures
	// (429, 503 capture_pending/not_ready, other 5xx, transport errors), and the
	// push rounds of mutations the server answers server_retryable (default 8).
	MaxAttempts int
	// BackoffBase and BackoffMax shape the exponential backoff between attempts
	// (defaults 200ms and 10s); a Retry-After answer is honoured instead.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxResponseBytes caps the body of every answer the SDK reads (default
	// 64 MiB). A larger answer is read no further and fails the Sync with a
	// *Error of code response_too_large, before anything of it is applied.
	// Pull and rebuild pages hold at most PageSize rows (and at most the
	// server's --max-page-size, 1000 by default), but PostgreSQL puts no bound
	// on a row: 64 MiB is 500 rows of 128 KiB in wire form, or 16 rows as large
	// as a push body may be (4 MiB by default). Replicas of tables with larger
	// rows raise it or lower PageSize.
	MaxResponseBytes int64
}

// Client is a local replica bound to one SQLite database file.
type Client struct {
	db  *sql.DB
	cfg Config
	tr  *transport

	mu   sync.Mutex    // one Sync at a time
	poke chan struct{} // Poke ends Live's wait
	id   string
	ssv  int64 // scope_set_version

	// schema is the installed manifest (nil before the first connect); only
	// Sync replaces it, under schemaMu, so Sync reads it without locking.
	schemaMu sync.RWMutex
	schema   *manifest
}

// Report summarizes one Sync.
type Report struct {
	Pushed   int      // mutations the server applied
	Rejected int      // mutations refused (conflicts and rejections), reverted locally unless later changes are queued
	Retried  int      // mutations answered server_retryable (kept queued)
	Pulled   int      // changes applied from pull pages
	Rebuilt  []string // scopes rebuilt (in order; a scope may appear twice)
	Pending  int      // local mutations still queued after the Sync
}

// Scope is one scope the replica holds.
type Scope struct {
	ID       string
	Synced   bool   // it has a cursor (false: it waits for a rebuild)
	Rows     int    // rows the replica holds for it
	Checksum uint32 // sum mod 2^32 of their row checksums
}

// Rejection records a local change the server refused. The row was reverted
// to its server state, unless later changes of it were queued: they are pushed
// by the next Sync and answered on their own (one made on top of a conflicting
// change conflicts in turn and is recorded too).
type Rejection struct {
	MutationID string
	Table      string
	PK         string // primary key as a JSON object
	Code       string // version_conflict, policy_rejected, validation_failed, table_not_synced
	Message    string
	At         time.Time
}

// Open opens (creating when missing) the SQLite database at path and prepares
// the SDK's side tables. The synced tables appear on the first Sync.
func Open(ctx context.Context, path string, cfg Config) (*Client, error) {
	if cfg.ServerURL == "" {
		return nil, errors.New("synchro: Config.ServerURL is required")
	}
	if _, err := url.Parse(cfg.ServerURL); err != nil {
		return nil, fmt.Errorf("synchro: Config.ServerURL: %w", err)
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 500
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 200 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 10 * time.Second
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 64 << 20
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 60 * time.Second}
	}
	// WAL lets the application read while the SDK writes; every transaction
	// takes the write lock at BEGIN so concurrent writers wait (busy timeout)
	// instead of failing on a lock upgrade.
	dsn := path + "?_busy_timeout=10000&_journal_mode=WAL&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	c := &Client{db: db, cfg: cfg, poke: make(chan struct{}, 1), tr: &transport{base: cfg.ServerURL, http: cfg.HTTPClient, token: cfg.Token,
		maxAttempts: cfg.MaxAttempts, backoffBase: cfg.BackoffBase, backoffMax: cfg.BackoffMax, maxBody: cfg.MaxResponseBytes}}
	if err := c.init(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return c, nil
}

// init creates the side tables and loads (or stores) the client state.
func (c *Client) init(ctx context.Context) error {
	if _, err := c.db.ExecContext(ctx, metadataDDL); err != nil {
		return fmt.Errorf("synchro: creating the metadata tables: %w", err)
	}
	// A replica created before images recorded where they came from gains the column.
	var pushed int
	if err := c.db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('_synchro_images') WHERE name = 'pushed'`).Scan(&pushed); err != nil {
		return fmt.Errorf("synchro: reading the metadata tables: %w", err)
	}
	if pushed == 0 {
		if _, err := c.db.ExecContext(ctx, `ALTER TABLE _synchro_images ADD COLUMN pushed INTEGER NOT NULL DEFAULT 0`); err != nil {
			return fmt.Errorf("synchro: upgrading the metadata tables: %w", err)
		}
	}
	var id string
	var ver sql.NullInt64
	var hash, text sql.NullString
	err := c.db.QueryRowContext(ctx, `SELECT client_id, schema_version, schema_hash, manifest, scope_set_version FROM _synchro_client`).
		Scan(&id, &ver, &hash, &text, &c.ssv)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		id = c.cfg.ClientID
		if id == "" {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			id = "go-" + hex.EncodeToString(b)
		}
		if _, err := c.db.ExecContext(ctx, `INSERT INTO _synchro_client (id, client_id, scope_set_version) VALUES (1, ?, 0)`, id); err != nil {
			return err
		}
	case err != nil:
		return err
	case c.cfg.ClientID != "" && c.cfg.ClientID != id:
		return fmt.Errorf("synchro: the database belongs to client %q, not %q", id, c.cfg.ClientID)
	}
	c.id = id
	if text.Valid {
		m, err := parseManifest([]byte(text.String))
		if err != nil {
			return fmt.Errorf("synchro: stored schema: %w", err)
		}
		c.schema = m
	}
	return nil
}

// DB is the replica's database. Applications read and write the synced tables
// with plain SQL; writes are captured and pushed by the next Sync.
func (c *Client) DB() *sql.DB { return c.db }

// ClientID is the client ID this replica syncs as.
func (c *Client) ClientID() string { return c.id }

// Close closes the database.
func (c *Client) Close() error { return c.db.Close() }

// Tables lists the synced tables of the current schema (none before the first
// Sync).
func (c *Client) Tables() []string {
	c.schemaMu.RLock()
	defer c.schemaMu.RUnlock()
	if c.schema == nil {
		return nil
	}
	names := make([]string, 0, len(c.schema.Tables))
	for _, t := range c.schema.Tables {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}

// Sync runs one sync cycle: connect, push the local queue, rebuild and pull
// every scope, verify checksums. Retryable failures are retried inside with
// backoff; anything else is returned (a protocol error as *Error).
func (c *Client) Sync(ctx context.Context) error {
	_, err := c.SyncReport(ctx)
	return err
}

// SyncReport is Sync returning what the cycle did.
func (c *Client) SyncReport(ctx context.Context) (Report, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var rep Report
	err := c.cycle(ctx, &rep)
	var e *Error
	if errors.As(err, &e) && e.Code == "schema_mismatch" {
		// The schema changed between connect and push/pull: connect again once.
		err = c.cycle(ctx, &rep)
	}
	if n, perr := c.pending(ctx); perr == nil {
		rep.Pending = n
	} else if err == nil {
		err = perr
	}
	return rep, err
}

// Pending is the number of local mutations waiting to be pushed.
func (c *Client) Pending(ctx context.Context) (int, error) { return c.pending(ctx) }

func (c *Client) pending(ctx context.Context) (int, error) {
	var n int
	err := c.db.QueryRowContext(ctx, `SELECT count(*) FROM _synchro_queue`).Scan(&n)
	return n, err
}

// Scopes lists the scopes the replica holds, by ID.
func (c *Client) Scopes(ctx context.Context) ([]Scope, error) {
	rows, err := c.db.QueryContext(ctx, `
		SELECT s.scope, s.cursor IS NOT NULL, count(r.pk), coalesce(sum(r.row_checksum), 0)
		FROM _synchro_scopes s LEFT JOIN _synchro_rows r ON r.scope = s.scope
		GROUP BY s.scope ORDER BY s.scope`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Scope
	for rows.Next() {
		var s Scope
		var sum int64
		if err := rows.Scan(&s.ID, &s.Synced, &s.Rows, &sum); err != nil {
			return nil, err
		}
		s.Checksum = uint32(sum)
		out = append(out, s)
	}
	return out, rows.Err()
}

// Rejections lists the recorded rejections of local changes, oldest first.
func (c *Client) Rejections(ctx context.Context) ([]Rejection, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT mutation_id, tbl, pk, code, message, at FROM _synchro_rejections ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Rejection
	for rows.Next() {
		var r Rejection
		var at string
		if err := rows.Scan(&r.MutationID, &r.Table, &r.PK, &r.Code, &r.Message, &at); err != nil {
			return nil, err
		}
		r.At, _ = time.Parse(time.RFC3339Nano, at)
		out = append(out, r)
	}
	return out, rows.Err()
}

// ClearRejections deletes the recorded rejections.
func (c *Client) ClearRejections(ctx context.Context) error {
	_, err := c.db.ExecContext(ctx, `DELETE FROM _synchro_rejections`)
	return err
}

// quoteIdent quotes a SQLite identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteLit quotes a SQLite string literal.
func quoteLit(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }
