package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// rebuildBench: a 100,000-row scope rebuilt in 1,000-row pages; baseline: the
// same rows read by a bare keyset-paginated SELECT.
func rebuildBench(ctx context.Context, srv *syncServer, pool *pgxpool.Pool) ([]row, error) {
	const user, n = "big", 100_000
	progress("sync: writing a %d-row scope", n)
	for i := 0; i < n; i += 10_000 {
		if _, err := pool.Exec(ctx, `INSERT INTO bench.items SELECT 700000000 + g, $1, repeat('x', 100) FROM generate_series($2::int, $2::int + 9999) g`, user, i); err != nil {
			return nil, err
		}
	}
	if err := waitMaterialized(ctx, pool); err != nil {
		return nil, err
	}
	var ignored map[string]any
	if err := srv.call(ctx, user, "/sync/connect", map[string]any{"client_id": "big-client", "protocol_version": 3}, &ignored); err != nil {
		return nil, err
	}
	progress("sync: rebuilding it")
	t0 := time.Now()
	got, _, err := srv.rebuild(ctx, user, "big-client", "user:"+user, 1000)
	if err != nil {
		return nil, err
	}
	rate := float64(got) / time.Since(t0).Seconds()
	if got != n {
		return nil, fmt.Errorf("rebuild returned %d rows, want %d", got, n)
	}
	t0 = time.Now()
	last := int64(-1)
	read, err := keysetPages(ctx, pool,
		`SELECT id, owner, body FROM bench.items WHERE owner = $1 AND id > $2 ORDER BY id LIMIT 1000`,
		func() []any { return []any{user, last} },
		func(rows pgx.Rows) error {
			var owner, body string
			return rows.Scan(&last, &owner, &body)
		})
	if err != nil {
		return nil, err
	}
	base := float64(read) / time.Since(t0).Seconds()
	inSQL, err := rebuildInSQL(ctx, pool, user, "big-client", "user:"+user)
	if err != nil {
		return nil, err
	}
	floor, err := rebuildFloor(ctx, pool, "user:"+user)
	if err != nil {
		return nil, err
	}
	return []row{
		{Name: fmt.Sprintf("rebuild of a %d-row scope (1,000-row pages)", n), Value: rate, Unit: "rows/s",
			Baseline: "bare SELECT pages", BaseVal: base, Target: ">= 150000"},
		{Name: "rebuild in SQL alone (synchro.rebuild pages called directly)", Value: inSQL, Unit: "rows/s",
			Baseline: "bare SELECT pages", BaseVal: base},
		{Name: "rebuild floor: its membership and version lookups, no rendering", Value: floor, Unit: "rows/s",
			Baseline: "bare SELECT pages", BaseVal: base},
	}, nil
}

// rebuildInSQL pages through a scope with synchro.rebuild called directly, in
// 1,000-row pages, and returns the rows a second of the database round trips
// alone (each page is decoded, for its cursor, outside the time).
func rebuildInSQL(ctx context.Context, pool *pgxpool.Pool, user, client, scope string) (float64, error) {
	var cursor *string
	var took time.Duration
	rows := 0
	for {
		t0 := time.Now()
		var page []byte
		if err := pool.QueryRow(ctx, `SELECT synchro.rebuild($1, $2, 1000, 8388608)::text`, user,
			map[string]any{"client_id": client, "scope": scope, "cursor": cursor}).Scan(&page); err != nil {
			return 0, err
		}
		took += time.Since(t0)
		var a rebuildAnswer
		if err := json.Unmarshal(page, &a); err != nil {
			return 0, err
		}
		rows += len(a.Records)
		if !a.HasMore {
			return float64(rows) / took.Seconds(), nil
		}
		cursor = a.Cursor
	}
}

// rebuildFloor reads a scope's rows the way synchro.rebuild retrieves them
// (keyset pages over its membership edges, each row's latest version at the
// high-watermark by index lookup), without building a page: what rebuild cannot
// go below while rows are found through membership and version history.
func rebuildFloor(ctx context.Context, pool *pgxpool.Pool, scope string) (float64, error) {
	var gen, h string
	if err := pool.QueryRow(ctx, `SELECT stream_generation::text, materialized_commit_lsn::text FROM synchro.progress`).Scan(&gen, &h); err != nil {
		return 0, err
	}
	t0 := time.Now()
	table, key := -1, ""
	read, err := keysetPages(ctx, pool,
		`SELECT m.table_id, m.key, v.version, v.image
		 FROM synchro.membership m
		 JOIN LATERAL (SELECT v.version, v.image FROM synchro.row_version v
		               WHERE v.table_id = m.table_id AND v.key = m.key AND v.commit_lsn <= $3::pg_lsn AND v.stream_generation = $1::uuid
		               ORDER BY v.commit_lsn DESC, v.event_ordinal DESC LIMIT 1) v ON true
		 WHERE m.stream_generation = $1::uuid AND m.scope = $2 AND (m.table_id, m.key) > ($4, $5)
		   AND m.from_lsn <= $3::pg_lsn AND (m.to_lsn IS NULL OR m.to_lsn > $3::pg_lsn)
		 ORDER BY m.table_id, m.key LIMIT 1000`,
		func() []any { return []any{gen, scope, h, table, key} },
		func(rows pgx.Rows) error {
			var version string
			var image []byte
			return rows.Scan(&table, &key, &version, &image)
		})
	if err != nil {
		return 0, err
	}
	return float64(read) / time.Since(t0).Seconds(), nil
}

// keysetPages runs query page by page (1,000 rows a page) with the arguments
// args returns before each page, scan reading each row (and moving the keyset
// position args reads), until a short page; it returns the rows read.
func keysetPages(ctx context.Context, pool *pgxpool.Pool, query string, args func() []any, scan func(pgx.Rows) error) (int, error) {
	read := 0
	for {
		rows, err := pool.Query(ctx, query, args()...)
		if err != nil {
			return read, err
		}
		page := 0
		for rows.Next() {
			if err := scan(rows); err != nil {
				rows.Close()
				return read, err
			}
			page++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return read, err
		}
		read += page
		if page < 1000 {
			return read, nil
		}
	}
}
