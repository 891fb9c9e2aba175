// Package dberr classifies database errors by what the caller can do about
// them, in the style of pgconn.SafeToRetry: one place that reads SQLSTATEs, so
// that callers ask "may a retry pass?" instead of switching on codes.
//
// It owns the classification only; it must not log, wrap or retry (callers
// decide what a class means for them) and must not look at message texts.
package dberr
