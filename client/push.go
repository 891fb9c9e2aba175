package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
)

// pushBatchSize is the most mutations of one push request.
const pushBatchSize = 100

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
			retried, err = pushApplier{a}.outcomes(batch, append(resp.Accepted, resp.Rejected...), rep)
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
		if !ok || t.isKey(name) || (isNull(raw) && !t.nullable[name]) {
			// A NULL in a column the server declares NOT NULL was left out by
			// the application: the server fills it (its default) or refuses the
			// mutation (validation_failed), and its answer's row replaces the
			// local one.
			continue
		}
		if m.Columns[name], err = toWire(typ, raw); err != nil {
			return fmt.Errorf("synchro: queued mutation %s column %s: %w", m.MutationID, name, err)
		}
	}
	return nil
}
