package client

import (
	"context"
	"database/sql"
)

// preparedTx is a transaction that prepares each statement text once and runs
// it again from the prepared statement: the SDK applies a page row by row with
// the same few statements, and preparing one (which also compiles the capture
// triggers it may fire) costs SQLite far more than running it. The statements
// close with the transaction.
type preparedTx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt
}

func newPreparedTx(tx *sql.Tx) *preparedTx {
	return &preparedTx{Tx: tx, stmts: map[string]*sql.Stmt{}}
}

func (p *preparedTx) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	if s, ok := p.stmts[query]; ok {
		return s, nil
	}
	s, err := p.Tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	p.stmts[query] = s
	return s, nil
}

func (p *preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	s, err := p.prepared(ctx, query)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(ctx, args...)
}

func (p *preparedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	s, err := p.prepared(ctx, query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(ctx, args...)
}

// QueryRowContext runs query unprepared when preparing it fails, so that the
// row carries that error.
func (p *preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	s, err := p.prepared(ctx, query)
	if err != nil {
		return p.Tx.QueryRowContext(ctx, query, args...)
	}
	return s.QueryRowContext(ctx, args...)
}
