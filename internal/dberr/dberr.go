package dberr

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Class is what a failed statement's error says about trying it again.
type Class int

const (
	// Transient: the attempt failed for a reason outside the statement and its
	// input: the connection or the caller (any error the server did not raise),
	// connection exceptions (08), transaction rollbacks such as serialization
	// failures and deadlocks (40), insufficient resources (53), operator
	// intervention such as shutdown or cancellation (57), system errors (58),
	// lock_timeout (55P03), the idle-in-transaction and transaction timeouts
	// (25P03, 25P04) and HeldByReset. The same work may pass when tried again.
	Transient Class = iota
	// Permanent: the database refuses the statement in its present state
	// (object_not_in_prerequisite_state, 55000: no stream yet, a poison
	// transaction unresolved). It fails the same way until that state changes;
	// the input is not at fault.
	Permanent
	// Poison: the statement fails because of what it was given (its data, a
	// rule or constraint over it, a refusal of the input): every other error the
	// server raised. It fails again on every retry of the same input.
	Poison
)

// HeldByReset is the SQLSTATE materialization raises for a batch of the active
// stream while a stream reset holds that stream blocked: not the batch's
// fault, so the session ends and the worker waits for the reset.
const HeldByReset = "SR001"

// Classify returns the class of err (Transient for nil).
func Classify(err error) Class {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return Transient
	}
	code := pgErr.Code
	if len(code) < 2 {
		return Poison
	}
	switch code[:2] {
	case "08", "40", "53", "57", "58":
		return Transient
	}
	switch code {
	case "55P03", "25P03", "25P04", HeldByReset: // lock_not_available, idle_in_transaction_session_timeout, transaction_timeout
		return Transient
	case "55000": // object_not_in_prerequisite_state
		return Permanent
	}
	return Poison
}

// SQLState returns the SQLSTATE of the server error in err's chain, or ""
// when the server raised none.
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
