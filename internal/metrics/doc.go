// Package metrics exports Synchro's Prometheus metrics: capture lag, poison
// state and readiness read from the database at scrape time, the worker's
// batches, and HTTP requests per route and status. Every method is safe on a nil
// *Metrics.
//
// The database-side samples are read at scrape time through internal/db
// (sql/queries/metrics.sql and readiness.sql); a scrape that cannot read them
// reports synchro_capture_state_up 0 and synchro_ready 0 rather than stale
// values. The package only observes: it never writes to the database and
// decides nothing (readiness itself is synchro.readiness's).
package metrics
