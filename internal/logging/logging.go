package logging

import (
	"io"
	"log/slog"
	"os"
	"time"
)

// New is a logger writing to w at info level, or debug when the environment
// sets SYNCHRO_LOG_LEVEL=debug.
func New(w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("SYNCHRO_LOG_LEVEL") == "debug" {
		level = slog.LevelDebug
	}
	return NewAt(w, level)
}

// NewAt is New at the given level.
func NewAt(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: readable}))
}

// readable renders a duration attribute as a string of about four significant
// digits.
func readable(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(Round(a.Value.Duration()).String())
	}
	return a
}

// Round keeps about four significant digits of d: 170.3s, 29.98ms, 840µs.
func Round(d time.Duration) time.Duration {
	for _, unit := range []time.Duration{100 * time.Second, 10 * time.Second, time.Second, 100 * time.Millisecond,
		10 * time.Millisecond, time.Millisecond, 100 * time.Microsecond, 10 * time.Microsecond} {
		if d >= unit {
			return d.Round(unit / 1000)
		}
	}
	return d.Round(time.Microsecond / 100)
}
