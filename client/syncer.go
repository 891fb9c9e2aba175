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

// Wire shapes of docs/protocol-v3.md (only the fields the SDK uses).
type (
	schemaRef struct {
		Version int64  `json:"version"`
		Hash    string `json:"hash"`
	}
	cursorRef struct {
		Cursor *string `json:"cursor"`
	}
	scopeDiff struct {
		Add []struct {
			ID string `json:"id"`
		} `json:"add"`
		Remove []string `json:"remove"`
	}
	connectRequest struct {
		ClientID        string               `json:"client_id"`
		Platform        string               `json:"platform,omitempty"`
		AppVersion      string               `json:"app_version,omitempty"`
		ProtocolVersion int                  `json:"protocol_version"`
		Schema          *schemaRef           `json:"schema,omitempty"`
		ScopeSetVersion int64                `json:"scope_set_version"`
		KnownScopes     map[string]cursorRef `json:"known_scopes"`
	}
	connectResponse struct {
		Schema struct {
			Version int64  `json:"version"`
			Hash    string `json:"hash"`
			Action  string `json:"action"`
		} `json:"schema"`
		SchemaDefinition json.RawMessage `json:"schema_definition"`
		ScopeSetVersion  int64           `json:"scope_set_version"`
		Scopes           scopeDiff       `json:"scopes"`
		Rebuild          []string        `json:"rebuild"`
	}
	mutation struct {
		MutationID  string                     `json:"mutation_id"`
		Table       string                     `json:"table"`
		Op          string                     `json:"op"`
		PK          json.RawMessage            `json:"pk"`
		BaseVersion *string                    `json:"base_version,omitempty"`
		Columns     map[string]json.RawMessage `json:"columns,omitempty"`
	}
	pushRequest struct {
		ClientID  string     `json:"client_id"`
		BatchID   string     `json:"batch_id"`
		Schema    *schemaRef `json:"schema,omitempty"`
		Mutations []mutation `json:"mutations"`
	}
	outcome struct {
		MutationID    string          `json:"mutation_id"`
		Status        string          `json:"status"`
		Code          string          `json:"code"`
		Message       string          `json:"message"`
		ServerVersion *string         `json:"server_version"`
		ServerRow     json.RawMessage `json:"server_row"`
		// ServerRowOmitted: the answer left the applied row out (its byte
		// budget was spent); the row arrives by pull.
		ServerRowOmitted bool `json:"server_row_omitted"`
	}
	pushResponse struct {
		Accepted []outcome `json:"accepted"`
		Rejected []outcome `json:"rejected"`
	}
	pullRequest struct {
		ClientID        string               `json:"client_id"`
		Schema          *schemaRef           `json:"schema,omitempty"`
		ScopeSetVersion int64                `json:"scope_set_version"`
		Scopes          map[string]cursorRef `json:"scopes"`
		Limit           int                  `json:"limit"`
	}
	change struct {
		Scope         string          `json:"scope"`
		Table         string          `json:"table"`
		Op            string          `json:"op"`
		PK            json.RawMessage `json:"pk"`
		Row           json.RawMessage `json:"row"`
		ServerVersion string          `json:"server_version"`
		RowChecksum   uint32          `json:"row_checksum"`
	}
	pullResponse struct {
		Changes         []change                   `json:"changes"`
		ScopeCursors    map[string]string          `json:"scope_cursors"`
		ScopeSetVersion int64                      `json:"scope_set_version"`
		ScopeUpdates    scopeDiff                  `json:"scope_updates"`
		Rebuild         []string                   `json:"rebuild"`
		HasMore         bool                       `json:"has_more"`
		Checksums       map[string]json.RawMessage `json:"checksums"`
	}
	rebuildRequest struct {
		ClientID string     `json:"client_id"`
		Schema   *schemaRef `json:"schema,omitempty"`
		Scope    string     `json:"scope"`
		Cursor   *string    `json:"cursor"`
		Limit    int        `json:"limit"`
	}
	rebuildResponse struct {
		Records []struct {
			Table         string          `json:"table"`
			PK            json.RawMessage `json:"pk"`
			Row           json.RawMessage `json:"row"`
			ServerVersion string          `json:"server_version"`
			RowChecksum   uint32          `json:"row_checksum"`
		} `json:"records"`
		Cursor           *string         `json:"cursor"`
		HasMore          bool            `json:"has_more"`
		FinalScopeCursor *string         `json:"final_scope_cursor"`
		Checksum         json.RawMessage `json:"checksum"`
	}
)

const (
	protocolVersion = 3
	pushBatchSize   = 100
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
		if err := c.pull(ctx, rep); err != nil {
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

// scopeChanges applies a scope diff: added scopes wait for a rebuild, removed
// ones are dropped, and held scopes listed in rebuild lose their cursor.
func (a *applier) scopeChanges(diff scopeDiff, rebuild []string, ssv int64) error {
	for _, s := range diff.Add {
		if err := a.addScope(s.ID); err != nil {
			return err
		}
	}
	for _, s := range diff.Remove {
		if err := a.dropScope(s); err != nil {
			return err
		}
	}
	for _, s := range rebuild {
		if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_scopes SET cursor = NULL WHERE scope = ?`, s); err != nil {
			return err
		}
	}
	_, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_client SET scope_set_version = ?`, ssv)
	return err
}

// queued is one queue entry of the batch in flight.
type queued struct {
	seq int64
	m   mutation
	key string
}

// push sends the queue as it was when the push began, in batches: the batch in
// flight (sent = 1, left by an interrupted Sync or by server_retryable answers)
// is resent unchanged first. Mutations answered server_retryable stay queued;
// after MaxAttempts such rounds the push ends and the rest waits for the next
// Sync.
func (c *Client) push(ctx context.Context, rep *Report) error {
	var last int64
	if err := c.db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM _synchro_queue`).Scan(&last); err != nil {
		return err
	}
	retryRounds := 0
	for {
		batch, err := c.nextBatch(ctx, last)
		if err != nil || len(batch) == 0 {
			return err
		}
		req := pushRequest{ClientID: c.id, BatchID: randomID(), Schema: c.schemaRef()}
		for _, q := range batch {
			req.Mutations = append(req.Mutations, q.m)
		}
		var resp pushResponse
		if err := c.tr.post(ctx, "/sync/push", req, &resp); err != nil {
			return err
		}
		retried := 0
		if err := c.apply(ctx, func(a *applier) error {
			var err error
			retried, err = a.outcomes(batch, append(resp.Accepted, resp.Rejected...), rep)
			return err
		}); err != nil {
			return err
		}
		if retried > 0 {
			retryRounds++
			if retryRounds >= c.cfg.MaxAttempts {
				return nil
			}
			if err := sleep(ctx, c.tr.backoff(retryRounds, 0)); err != nil {
				return err
			}
		}
	}
}

// nextBatch marks the next batch in flight (unless one is) and returns it.
func (c *Client) nextBatch(ctx context.Context, last int64) ([]queued, error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE _synchro_queue SET sent = 1
		WHERE NOT EXISTS (SELECT 1 FROM _synchro_queue WHERE sent = 1)
		  AND seq IN (SELECT seq FROM _synchro_queue WHERE sent = 0 AND seq <= ? ORDER BY seq LIMIT ?)`, last, pushBatchSize); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, mutation_id, tbl, op, pk, columns, base_version FROM _synchro_queue WHERE sent = 1 ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []queued
	for rows.Next() {
		var q queued
		var cols sql.NullString
		var base sql.NullString
		if err := rows.Scan(&q.seq, &q.m.MutationID, &q.m.Table, &q.m.Op, &q.key, &cols, &base); err != nil {
			return nil, err
		}
		q.m.PK = json.RawMessage(q.key)
		if base.Valid {
			q.m.BaseVersion = &base.String
		}
		if err := c.wireColumns(&q.m, cols); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

// wireColumns converts the columns a trigger recorded to wire values.
func (c *Client) wireColumns(m *mutation, cols sql.NullString) error {
	if !cols.Valid || m.Op == "delete" {
		return nil
	}
	t := c.schema.byName[m.Table]
	if t == nil {
		return nil // the server answers table_not_synced
	}
	rec, err := decodeObject([]byte(cols.String))
	if err != nil {
		return fmt.Errorf("synchro: queued mutation %s: %w", m.MutationID, err)
	}
	m.Columns = map[string]json.RawMessage{}
	for name, raw := range rec {
		typ, ok := t.types[name]
		if !ok || t.isKey(name) {
			continue
		}
		if m.Columns[name], err = toWire(typ, raw); err != nil {
			return fmt.Errorf("synchro: queued mutation %s column %s: %w", m.MutationID, name, err)
		}
	}
	return nil
}

// outcomes applies a push answer to the batch; it returns how many mutations
// stay in flight (answered server_retryable, or not answered at all). An
// answer carrying server_row moves the row to that row's key (serverKey).
//   - applied: the entry leaves the queue, the answer is the row's server image
//     and later entries of the row take its version as base_version; the local
//     row takes server_row unless later local changes are queued. An answer
//     that omitted the row (server_row_omitted: the push answer's byte budget
//     was spent) only sets that base_version: the local row stays as pushed
//     and its server image arrives by pull.
//   - conflict: the entry leaves the queue, a rejection is recorded, server_row
//     is the row's server image and the local row takes it (is deleted when it
//     is null, or when the row is in none of the replica's scopes) unless later
//     local changes are queued. Those keep their base_version (the version
//     they were made on), so the server answers them too, as a conflict.
//   - rejected: likewise, the row is reverted to its last server image
//     (deleted when there is none) unless later local changes are queued.
//   - retry: the entry stays in flight and is resent with the same mutation_id.
//
// Any other status is an error: the transaction rolls back, the batch stays in
// flight.
func (a *applier) outcomes(batch []queued, answers []outcome, rep *Report) (int, error) {
	byID := map[string]queued{}
	for _, q := range batch {
		byID[q.m.MutationID] = q
	}
	retried := 0
	for _, o := range answers {
		q, ok := byID[o.MutationID]
		if !ok {
			continue
		}
		delete(byID, o.MutationID)
		switch o.Status {
		case "retry":
			retried++
			rep.Retried++
			continue
		case "applied", "conflict", "rejected":
		default: // never taken for a rejection: the local change would be discarded
			return 0, fmt.Errorf("synchro: push answered mutation %s with unknown status %q", o.MutationID, o.Status)
		}
		if err := a.settle(q, o); err != nil {
			return 0, err
		}
		t := a.m.byName[q.m.Table]
		if t == nil { // no local table (it cannot have captured the entry)
			continue
		}
		k, err := a.key(t, q.m.PK)
		if err == nil && !isNull(o.ServerRow) {
			k, err = a.serverKey(t, k, o.ServerRow)
		}
		if err != nil {
			return 0, err
		}
		switch {
		case o.Status == "applied":
			rep.Pushed++
			err = a.applied(t, k, q, o)
		case o.Status == "conflict":
			rep.Rejected++
			err = a.conflicted(t, k, o)
		default:
			rep.Rejected++
			err = a.revert(t, k)
		}
		if err != nil {
			return 0, err
		}
	}
	return retried + len(byID), nil
}

// settle removes an answered entry from the queue, recording it when it was
// refused. The row's later entries (changes made while it was in flight) stay
// queued, to be answered on their own; after a refused insert or delete a later
// update becomes an upsert, as the capture triggers merge an update into them.
func (a *applier) settle(q queued, o outcome) error {
	if _, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_queue WHERE seq = ?`, q.seq); err != nil {
		return err
	}
	if o.Status == "applied" {
		return nil
	}
	if q.m.Op != "update" {
		if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_queue SET op = 'upsert' WHERE tbl = ? AND pk = ? AND op = 'update'`, q.m.Table, q.key); err != nil {
			return err
		}
	}
	code := o.Code
	if code == "" {
		code = o.Status
	}
	_, err := a.tx.ExecContext(a.ctx, `INSERT INTO _synchro_rejections (mutation_id, tbl, pk, code, message, at) VALUES (?, ?, ?, ?, ?, ?)`,
		q.m.MutationID, q.m.Table, q.key, code, o.Message, time.Now().UTC().Format(time.RFC3339Nano))
	return err
}

func (a *applier) applied(t *table, k rowKey, q queued, o outcome) error {
	if o.ServerRowOmitted && q.m.Op != "delete" {
		// The row was applied as pushed; its server image comes by pull. Later
		// entries of the row are made on this version.
		_, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_queue SET base_version = ? WHERE tbl = ? AND pk = ?`, o.ServerVersion, t.Name, k.text)
		return err
	}
	if q.m.Op == "delete" || isNull(o.ServerRow) {
		if err := a.dropImage(t, k); err != nil {
			return err
		}
		if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_queue SET base_version = NULL WHERE tbl = ? AND pk = ?`, t.Name, k.text); err != nil {
			return err
		}
		if q.m.Op == "delete" {
			return nil
		}
		// A write applied into none of the user's scopes (a write policy let
		// it, or the user left the row's scopes meanwhile): no pull will ever
		// deliver the row, so the replica drops it, unless a scope still holds
		// it (that scope's pull removes it) or later changes are queued.
		return a.forgetUnheld(t, k)
	}
	if err := a.setImage(t, k, o.ServerRow, o.ServerVersion, true); err != nil {
		return err
	}
	if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_queue SET base_version = ? WHERE tbl = ? AND pk = ?`, o.ServerVersion, t.Name, k.text); err != nil {
		return err
	}
	return a.resolve(t, k, o.ServerRow)
}

func (a *applier) conflicted(t *table, k rowKey, o outcome) error {
	known, err := a.held(t, k)
	if err != nil {
		return err
	}
	if !known {
		img, err := a.image(t, k)
		if err != nil {
			return err
		}
		known = img != nil
	}
	if isNull(o.ServerRow) || !known {
		if err := a.dropImage(t, k); err != nil {
			return err
		}
		return a.resolve(t, k, nil)
	}
	if err := a.setImage(t, k, o.ServerRow, o.ServerVersion, true); err != nil {
		return err
	}
	return a.resolve(t, k, o.ServerRow)
}

// revert restores the row's last server image, or deletes it when there is
// none (unless later changes of it are queued).
func (a *applier) revert(t *table, k rowKey) error {
	img, err := a.image(t, k)
	if err != nil {
		return err
	}
	return a.resolve(t, k, img)
}

// pull pages the held scopes' changes until has_more is false, applying each
// page, its scope updates and its cursors in one transaction; on the final page
// a scope whose checksum does not match loses its cursor (rebuild).
func (c *Client) pull(ctx context.Context, rep *Report) error {
	for range maxPages {
		scopes, err := c.loadScopes(ctx)
		if err != nil {
			return err
		}
		var resp pullResponse
		req := pullRequest{ClientID: c.id, Schema: c.schemaRef(), ScopeSetVersion: c.ssv, Scopes: scopes, Limit: c.cfg.PageSize}
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

// page applies one pull page. It serves only the scopes asked to resume (sent
// with a cursor) and not listed in rebuild: whatever it carries for another
// scope (one it adds, one waiting for a rebuild) is ignored, since such a scope
// is rebuilt, and a cursor taken for it would mark it synced without the rows
// before that cursor.
func (a *applier) page(requested map[string]cursorRef, resp *pullResponse, rep *Report) error {
	rebuild := map[string]bool{}
	for _, s := range resp.Rebuild {
		rebuild[s] = true
	}
	served := func(scope string) bool { return requested[scope].Cursor != nil && !rebuild[scope] }
	for _, ch := range resp.Changes {
		if !served(ch.Scope) {
			continue
		}
		t := a.m.byName[ch.Table]
		if t == nil {
			return fmt.Errorf("synchro: pull delivered table %q, which is not in the schema", ch.Table)
		}
		k, err := a.key(t, ch.PK)
		if err != nil {
			return err
		}
		switch ch.Op {
		case "upsert":
			err = a.upsert(ch.Scope, t, k, ch.Row, ch.ServerVersion, ch.RowChecksum)
		case "delete":
			err = a.remove(ch.Scope, t, k)
		default:
			err = fmt.Errorf("synchro: pull delivered unknown op %q", ch.Op)
		}
		if err != nil {
			return err
		}
		rep.Pulled++
	}
	if err := a.scopeChanges(resp.ScopeUpdates, resp.Rebuild, resp.ScopeSetVersion); err != nil {
		return err
	}
	for s, cur := range resp.ScopeCursors {
		if served(s) {
			if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_scopes SET cursor = ? WHERE scope = ?`, cur, s); err != nil {
				return err
			}
		}
	}
	if resp.HasMore {
		return nil
	}
	// Every served scope (given a cursor) is verified; one without a checksum
	// is rebuilt like a mismatch.
	verify := map[string]bool{}
	for s := range resp.Checksums {
		verify[s] = true
	}
	for s := range resp.ScopeCursors {
		verify[s] = true
	}
	for s := range verify {
		if !served(s) {
			continue
		}
		raw, match := resp.Checksums[s]
		if match {
			want, err := parseChecksum(raw)
			if err != nil {
				return fmt.Errorf("synchro: scope %s: %w", s, err)
			}
			got, err := scopeSum(a.ctx, a.tx, "_synchro_rows", s)
			if err != nil {
				return err
			}
			match = got == want
		}
		if !match {
			if _, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_scopes SET cursor = NULL WHERE scope = ?`, s); err != nil {
				return err
			}
		}
	}
	// Every scope is now at this page's position, where all the scopes holding a
	// row hold its current version. A scope holding a row at another version
	// than the row's image means the image is stale: a scope whose cursor was
	// behind another's (one rebuilt later, say) delivered an older version of a
	// row after the newer one had arrived. Such scopes are rebuilt, which
	// rewrites the row from the server. Rows with queued local changes are left
	// to their push, and images from a push answer to the stream: a conflict's
	// server_row can be a version the stream has not reached yet (a direct
	// write not yet captured), which the stream then delivers.
	_, err := a.tx.ExecContext(a.ctx, `UPDATE _synchro_scopes SET cursor = NULL WHERE scope IN (
		SELECT r.scope FROM _synchro_rows r JOIN _synchro_images i ON i.tbl = r.tbl AND i.pk = r.pk
		WHERE r.server_version IS NOT i.server_version AND NOT i.pushed
		  AND NOT EXISTS (SELECT 1 FROM _synchro_queue q WHERE q.tbl = r.tbl AND q.pk = r.pk))`)
	return err
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
// (invalid_request on a later page) or a checksum mismatch restarts it; a scope
// the server refuses on the first page is no longer assigned and is dropped.
func (c *Client) rebuild(ctx context.Context, scope string, rep *Report) error {
	for range maxRebuildAttempts {
		if _, err := c.db.ExecContext(ctx, `DELETE FROM _synchro_staging WHERE scope = ?`, scope); err != nil {
			return err
		}
		var cursor *string
		var last rebuildResponse
		restart := false
		for page := 0; ; page++ {
			if page >= maxPages {
				return fmt.Errorf("synchro: rebuild of %s does not end", scope)
			}
			var resp rebuildResponse
			req := rebuildRequest{ClientID: c.id, Schema: c.schemaRef(), Scope: scope, Cursor: cursor, Limit: c.cfg.PageSize}
			if err := c.tr.post(ctx, "/sync/rebuild", req, &resp); err != nil {
				var e *Error
				if errors.As(err, &e) && e.Code == "invalid_request" {
					if cursor == nil {
						return c.apply(ctx, func(a *applier) error { return a.dropScope(scope) })
					}
					restart = true
					break
				}
				return err
			}
			if err := c.stage(ctx, scope, &resp); err != nil {
				return err
			}
			if !resp.HasMore {
				last = resp
				break
			}
			if resp.Cursor == nil {
				return fmt.Errorf("synchro: rebuild of %s: a page with has_more carries no cursor", scope)
			}
			cursor = resp.Cursor
		}
		if restart {
			continue
		}
		want, err := parseChecksum(last.Checksum)
		if err != nil {
			return fmt.Errorf("synchro: rebuild of %s: %w", scope, err)
		}
		if got, err := scopeSum(ctx, c.db, "_synchro_staging", scope); err != nil {
			return err
		} else if got != want {
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
	return fmt.Errorf("synchro: rebuild of %s failed %d times (checksum mismatch or restarted session)", scope, maxRebuildAttempts)
}

// stage stores one rebuild page.
func (c *Client) stage(ctx context.Context, scope string, resp *rebuildResponse) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
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

// replaceScope makes the staged rebuild the scope's contents: rows it no longer
// holds leave it, staged rows are applied, and the cursor is set.
func (a *applier) replaceScope(scope, cursor string) error {
	gone, err := a.scopeRows(`SELECT tbl, pk FROM _synchro_rows r WHERE scope = ?
		AND NOT EXISTS (SELECT 1 FROM _synchro_staging s WHERE s.scope = r.scope AND s.tbl = r.tbl AND s.pk = r.pk)`, scope)
	if err != nil {
		return err
	}
	for _, r := range gone {
		if err := a.removeByText(scope, r[0], r[1]); err != nil {
			return err
		}
	}
	after := [2]string{"", ""}
	for {
		type staged struct {
			tbl, pk, row string
			version      string
			checksum     int64
		}
		rows, err := a.tx.QueryContext(a.ctx, `SELECT tbl, pk, row, server_version, row_checksum FROM _synchro_staging
			WHERE scope = ? AND (tbl, pk) > (?, ?) ORDER BY tbl, pk LIMIT 500`, scope, after[0], after[1])
		if err != nil {
			return err
		}
		var chunk []staged
		for rows.Next() {
			var s staged
			if err := rows.Scan(&s.tbl, &s.pk, &s.row, &s.version, &s.checksum); err != nil {
				rows.Close()
				return err
			}
			chunk = append(chunk, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(chunk) == 0 {
			break
		}
		for _, s := range chunk {
			t := a.m.byName[s.tbl]
			k, err := a.key(t, json.RawMessage(s.pk))
			if err != nil {
				return err
			}
			if err := a.upsert(scope, t, k, json.RawMessage(s.row), s.version, uint32(s.checksum)); err != nil {
				return err
			}
		}
		after = [2]string{chunk[len(chunk)-1].tbl, chunk[len(chunk)-1].pk}
	}
	if _, err := a.tx.ExecContext(a.ctx, `DELETE FROM _synchro_staging WHERE scope = ?`, scope); err != nil {
		return err
	}
	return a.setCursor(scope, &cursor)
}

func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "b_" + hex.EncodeToString(b)
}
