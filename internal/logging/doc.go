// Package logging is the one log format of Synchro's binaries (synchrod,
// synchroctl, synchrobench): JSON lines (log/slog), durations as readable
// strings ("170.3s", "29.98ms", "840µs") rather than nanoseconds.
//
// It owns the handler and the level (SYNCHRO_LOG_LEVEL=debug); what a log line
// may carry is the caller's rule: no SQL text, row data or secrets.
package logging
