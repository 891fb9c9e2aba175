package main

import (
	"context"
	"fmt"
	"strings"
)

// fenceWorkload is one write workload of the fence group: a pgbench script
// run against a registered (fenced) table and against the same table
// unregistered, in the same database and run.
type fenceWorkload struct {
	name   string
	script func(table string) string
}

// wideColumns is the number of columns of the wide-row tables (key included).
const wideColumns = 30

// fenceRounds is the number of alternations of each pair of the fence group.
const fenceRounds = 3

// fenceRun measures what the fence costs an application's writes: pgbench
// (2 clients) writing a registered table against writing an identical
// unregistered one, for 1-row and 10-row INSERT transactions, for 1-row and
// 10-row UPDATE transactions of existing rows (each client updates rows of
// its own key range, so that the clients never wait on each other's row
// locks), and for 1-row and 10-row INSERT transactions of 30-column rows. No
// worker and no slot run: the rows measure the write alone.
func fenceRun(ctx context.Context, adminURL, pgbin string, seconds int) ([]row, error) {
	url, pool, drop, err := benchDB(ctx, adminURL, "bench_fence")
	if err != nil {
		return nil, err
	}
	defer drop()
	var cols, vals []string
	for i := 2; i <= wideColumns; i++ {
		cols = append(cols, fmt.Sprintf("c%d text", i))
		vals = append(vals, fmt.Sprintf("'value %d'", i))
	}
	wide := strings.Join(cols, ", ")
	const updRows = 200000
	if _, err := pool.Exec(ctx, fmt.Sprintf(`
		CREATE TABLE bench.wide (id bigint PRIMARY KEY, %[1]s);
		CREATE TABLE bench.plain_wide (id bigint PRIMARY KEY, %[1]s);
		SELECT synchro.register_table('bench.wide', '{"kind":"shared","scope":"all"}');
		CREATE TABLE bench.upd (id bigint PRIMARY KEY, owner text NOT NULL, body text, n bigint NOT NULL DEFAULT 0);
		CREATE TABLE bench.plain_upd (LIKE bench.upd INCLUDING ALL);
		INSERT INTO bench.upd SELECT g, 'u' || (g %% 100), 'payload' FROM generate_series(1, %[2]d) g;
		INSERT INTO bench.plain_upd SELECT * FROM bench.upd;
		SELECT synchro.register_table('bench.upd', '{"kind":"column","template":"user:{owner}"}')`, wide, updRows)); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE bench.upd, bench.plain_upd`); err != nil {
		return nil, err
	}
	wideValues := strings.Join(vals, ", ")
	tx := func(width int, stmt string) string {
		var b strings.Builder
		b.WriteString("BEGIN;\n")
		for i := 0; i < width; i++ {
			b.WriteString(stmt)
		}
		b.WriteString("COMMIT;\n")
		return b.String()
	}
	// Each client's key range: half of the rows each.
	update := "\\set k random(1, " + fmt.Sprint(updRows/2) + ") + (:client_id * " + fmt.Sprint(updRows/2) + ")\n"
	var workloads []fenceWorkload
	for _, width := range []int{1, 10} {
		width := width
		workloads = append(workloads,
			fenceWorkload{fmt.Sprintf("%d-row INSERT tx", width), func(table string) string {
				return tx(width, "INSERT INTO bench."+table+"items VALUES (nextval('bench.seq'), 'u' || (random() * 100)::int, 'payload');\n")
			}},
			fenceWorkload{fmt.Sprintf("%d-row UPDATE tx", width), func(table string) string {
				return tx(width, update+"UPDATE bench."+table+"upd SET n = n + 1, body = 'updated' WHERE id = :k;\n")
			}},
			fenceWorkload{fmt.Sprintf("%d-row INSERT tx, %d columns", width, wideColumns), func(table string) string {
				return tx(width, "INSERT INTO bench."+table+"wide VALUES (nextval('bench.seq'), "+wideValues+");\n")
			}})
	}
	// The host is shared: each pair alternates in fenceRounds rounds (plain
	// first, then fenced first, ...), and each rate is the mean of its rounds.
	per := max(2, seconds/fenceRounds)
	var rows []row
	for _, w := range workloads {
		progress("fence: %s, plain and fenced alternating, %d rounds of %ds each", w.name, fenceRounds, per)
		var plain, fenced float64
		for round := 0; round < fenceRounds; round++ {
			order := []string{"plain_", ""}
			if round%2 == 1 {
				order = []string{"", "plain_"}
			}
			for _, table := range order {
				tps, _, err := pgbench(ctx, pgbin, url, w.script(table), per)
				if err != nil {
					return nil, fmt.Errorf("%s, %q: %w", w.name, table, err)
				}
				if table == "" {
					fenced += tps / fenceRounds
				} else {
					plain += tps / fenceRounds
				}
			}
		}
		target := ""
		if strings.HasSuffix(w.name, "INSERT tx") {
			target = ">= 0.55x"
		}
		rows = append(rows, row{Name: "fence cost, " + w.name + ", 2 clients", Value: fenced, Unit: "tx/s",
			Baseline: "same writes, unregistered table", BaseVal: plain, Target: target})
	}
	return rows, nil
}
