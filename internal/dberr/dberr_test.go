package dberr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Classify sorts errors as the capture worker relies on: what a retry may
// pass, what the database refuses in its present state, and the rest.
func TestClassify(t *testing.T) {
	for code, want := range map[string]Class{
		"08006": Transient, "40001": Transient, "40P01": Transient, "53100": Transient, "57014": Transient,
		"57P01": Transient, "58030": Transient, "55P03": Transient, "25P03": Transient, "25P04": Transient,
		"55000": Permanent,
		"22P02": Poison, "23505": Poison, "42501": Poison, "55006": Poison, "XX001": Poison, "P0001": Poison,
	} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code})
		if got := Classify(err); got != want {
			t.Errorf("Classify(%s) = %d, want %d", code, got, want)
		}
		if got := SQLState(err); got != code {
			t.Errorf("SQLState(%s) = %q", code, got)
		}
	}
	for _, err := range []error{nil, context.Canceled, errors.New("connection reset")} {
		if got := Classify(err); got != Transient {
			t.Errorf("Classify(%v) = %d, want Transient", err, got)
		}
		if got := SQLState(err); got != "" {
			t.Errorf("SQLState(%v) = %q, want none", err, got)
		}
	}
}
