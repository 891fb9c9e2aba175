package client

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

const (
	// maxRounds bounds the rebuild-then-pull rounds of one Sync (new scopes or
	// checksum mismatches found by a pull start another round).
	maxRounds = 4
	// maxRebuildAttempts bounds the restarts of one scope's rebuild.
	maxRebuildAttempts = 3
	maxPages           = 1 << 20
)

// cycle runs connect, push, then rebuild-and-pull rounds until every scope has
// a cursor and the final pull verified its checksum.
func (c *Client) cycle(ctx context.Context, rep *Report) error {
	if err := c.connect(ctx); err != nil {
		return err
	}
	if err := c.push(ctx, rep); err != nil {
		return err
	}
	for range maxRounds {
		if err := c.rebuildPending(ctx, rep); err != nil {
			return err
		}
		if err := c.pull(ctx, rep, 0); err != nil {
			return err
		}
		scopes, err := c.loadScopes(ctx)
		if err != nil {
			return err
		}
		done := true
		for _, cur := range scopes {
			done = done && cur.Cursor != nil
		}
		if done {
			return c.apply(ctx, func(a *applier) error { return a.forgetOrphans() })
		}
	}
	return fmt.Errorf("synchro: scopes still need a rebuild after %d rounds", maxRounds)
}

func (c *Client) schemaRef() *schemaRef {
	if c.schema == nil {
		return nil
	}
	return &schemaRef{Version: c.schema.Version, Hash: c.schema.Hash}
}

// loadScopes is the held scopes with their cursors.
func (c *Client) loadScopes(ctx context.Context) (map[string]cursorRef, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT scope, cursor FROM _synchro_scopes`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]cursorRef{}
	for rows.Next() {
		var s string
		var cur sql.NullString
		if err := rows.Scan(&s, &cur); err != nil {
			return nil, err
		}
		var r cursorRef
		if cur.Valid {
			r.Cursor = &cur.String
		}
		out[s] = r
	}
	return out, rows.Err()
}

// connect registers or resumes the client, installs the schema the server
// asks for, and applies the scope diff.
func (c *Client) connect(ctx context.Context) error {
	known, err := c.loadScopes(ctx)
	if err != nil {
		return err
	}
	req := connectRequest{ClientID: c.id, Platform: c.cfg.Platform, AppVersion: c.cfg.AppVersion,
		ProtocolVersion: protocolVersion, Schema: c.schemaRef(), ScopeSetVersion: c.ssv, KnownScopes: known}
	var resp connectResponse
	if err := c.tr.post(ctx, "/sync/connect", req, &resp); err != nil {
		return err
	}
	switch action := resp.Schema.Action; action {
	case "none":
		if c.schema == nil {
			return errors.New("synchro: the server answered schema action none to a client without a schema")
		}
	case "replace", "rebuild_local", "fetch":
		raw := resp.SchemaDefinition
		if isNull(raw) {
			var def json.RawMessage
			if err := c.tr.get(ctx, "/sync/schema", &def); err != nil {
				return err
			}
			raw = def
		}
		m, err := parseManifest(raw)
		if err != nil {
			return fmt.Errorf("synchro: %w", err)
		}
		if err := c.installSchema(ctx, m, action == "rebuild_local"); err != nil {
			return err
		}
	default:
		return &Error{Status: http.StatusOK, Code: "unsupported", Message: fmt.Sprintf("schema action %q is not supported by this SDK", action)}
	}
	if err := c.apply(ctx, func(a *applier) error {
		return a.scopeChanges(resp.Scopes, resp.Rebuild, resp.ScopeSetVersion)
	}); err != nil {
		return err
	}
	c.ssv = resp.ScopeSetVersion
	return nil
}

// pull pages the held scopes' changes until has_more is false, applying each
// page, its scope updates and its cursors in one transaction; on the final page
// a scope whose checksum does not match loses its cursor (rebuild). The first
// page may wait up to wait for a change (a live pull).
func (c *Client) pull(ctx context.Context, rep *Report, wait time.Duration) error {
	for range maxPages {
		scopes, err := c.loadScopes(ctx)
		if err != nil {
			return err
		}
		var resp pullResponse
		req := pullRequest{ClientID: c.id, Schema: c.schemaRef(), ScopeSetVersion: c.ssv, Scopes: scopes, Limit: c.cfg.PageSize,
			WaitMs: wait.Milliseconds()}
		wait = 0
		if err := c.tr.post(ctx, "/sync/pull", req, &resp); err != nil {
			return err
		}
		if err := c.apply(ctx, func(a *applier) error { return a.page(scopes, &resp, rep) }); err != nil {
			return err
		}
		c.ssv = resp.ScopeSetVersion
		if !resp.HasMore {
			return nil
		}
	}
	return errors.New("synchro: pull does not end")
}

// rebuildPending rebuilds every held scope without a cursor.
func (c *Client) rebuildPending(ctx context.Context, rep *Report) error {
	scopes, err := c.loadScopes(ctx)
	if err != nil {
		return err
	}
	for s, cur := range scopes {
		if cur.Cursor == nil {
			if err := c.rebuild(ctx, s, rep); err != nil {
				return err
			}
		}
	}
	return nil
}

// rebuild pages a scope's complete contents into staging, checks the
// checksum, then replaces the scope's rows and sets its cursor to the final
// scope cursor in one transaction. A session the server no longer accepts
// (invalid_request on a later page, or rebuild_expired on any page: the
// retention horizon passed its position) or a checksum mismatch restarts it
// with cursor null; a scope the server refuses with invalid_request on the
// first page is no longer assigned and is dropped.
func (c *Client) rebuild(ctx context.Context, scope string, rep *Report) error {
	var why error // what made the last attempt restart
	for range maxRebuildAttempts {
		if _, err := c.db.ExecContext(ctx, `DELETE FROM _synchro_staging WHERE scope = ?`, scope); err != nil {
			return err
		}
		last, restart, err := c.stageAll(ctx, scope)
		switch {
		case err != nil:
			return err
		case restart != nil:
			why = restart
			continue
		case last == nil: // refused on the first page: not assigned any more
			return c.apply(ctx, func(a *applier) error { return a.dropScope(scope) })
		}
		want, err := parseChecksum(last.Checksum)
		if err != nil {
			return fmt.Errorf("synchro: rebuild of %s: %w", scope, err)
		}
		if got, err := scopeSum(ctx, c.db, "_synchro_staging", scope); err != nil {
			return err
		} else if got != want {
			why = fmt.Errorf("the staged rows' checksum %d is not the server's %d", got, want)
			continue
		}
		if last.FinalScopeCursor == nil {
			return fmt.Errorf("synchro: rebuild of %s: the final page carries no final_scope_cursor", scope)
		}
		if err := c.apply(ctx, func(a *applier) error { return a.replaceScope(scope, *last.FinalScopeCursor) }); err != nil {
			return err
		}
		rep.Rebuilt = append(rep.Rebuilt, scope)
		return nil
	}
	// The last refusal is wrapped: a session overtaken every time is the
	// server's retryable rebuild_expired, which a later Sync retries.
	return fmt.Errorf("synchro: rebuild of %s restarted %d times, the last: %w", scope, maxRebuildAttempts, why)
}

// rebuildPage is one answer of a rebuild session, or the error that ended it.
type rebuildPage struct {
	resp  rebuildResponse
	first bool // the session's first page (sent with cursor null)
	err   error
}

// stageAll runs one rebuild session of scope into staging and returns its last
// page. The next page is fetched while the one before is staged (each request
// needs only the previous answer's cursor), so the server's work and the
// replica's overlap. restart is the refusal of a session the server stopped
// accepting (invalid_request on a later page, rebuild_expired on any page);
// last is nil when it refused the first page with invalid_request.
func (c *Client) stageAll(ctx context.Context, scope string) (last *rebuildResponse, restart, err error) {
	fetchCtx, cancel := context.WithCancel(ctx)
	pages := make(chan rebuildPage, 1)
	go c.fetchRebuild(fetchCtx, scope, pages)
	defer func() {
		cancel()
		for range pages { // let the fetcher end
		}
	}()
	for p := range pages {
		if p.err != nil {
			var e *Error
			switch {
			case !errors.As(p.err, &e):
			case e.Code == codeRebuildExpired, e.Code == "invalid_request" && !p.first:
				return nil, p.err, nil
			case e.Code == "invalid_request":
				return nil, nil, nil
			}
			return nil, nil, p.err
		}
		if err := c.stage(ctx, scope, &p.resp); err != nil {
			return nil, nil, err
		}
		if !p.resp.HasMore {
			return &p.resp, nil, nil
		}
	}
	return nil, nil, ctx.Err()
}

// fetchRebuild requests the pages of one rebuild session of scope in order and
// sends each to pages, ending (and closing pages) after the last page, an
// error, or when ctx ends.
func (c *Client) fetchRebuild(ctx context.Context, scope string, pages chan<- rebuildPage) {
	defer close(pages)
	var cursor *string
	for page := 0; ; page++ {
		p := rebuildPage{first: cursor == nil}
		if page >= maxPages {
			p.err = fmt.Errorf("synchro: rebuild of %s does not end", scope)
		} else {
			req := rebuildRequest{ClientID: c.id, Schema: c.schemaRef(), Scope: scope, Cursor: cursor, Limit: c.cfg.PageSize}
			p.err = c.tr.post(ctx, "/sync/rebuild", req, &p.resp)
		}
		if p.err == nil && p.resp.HasMore && p.resp.Cursor == nil {
			p.err = fmt.Errorf("synchro: rebuild of %s: a page with has_more carries no cursor", scope)
		}
		select {
		case pages <- p:
		case <-ctx.Done():
			return
		}
		if p.err != nil || !p.resp.HasMore {
			return
		}
		cursor = p.resp.Cursor
	}
}

// stage stores one rebuild page.
func (c *Client) stage(ctx context.Context, scope string, resp *rebuildResponse) error {
	begun, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer begun.Rollback()
	tx := newPreparedTx(begun)
	for _, r := range resp.Records {
		t := c.schema.byName[r.Table]
		if t == nil {
			return fmt.Errorf("synchro: rebuild delivered table %q, which is not in the schema", r.Table)
		}
		k, err := keyOf(ctx, tx, t, r.PK)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO _synchro_staging (scope, tbl, pk, row, server_version, row_checksum)
			VALUES (?, ?, ?, ?, ?, ?)`, scope, t.Name, k.text, string(r.Row), r.ServerVersion, int64(r.RowChecksum)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "b_" + hex.EncodeToString(b)
}
