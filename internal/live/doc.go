// Package live wakes long-polling pulls (docs/protocol.md, "Live pull").
//
// Materialization sends a notification on channel synchro_changes when it
// commits a change for some scopes (synchro.notify_changes: the scopes, one a
// line, or "*" for every scope). A Hub holds one LISTEN connection per process,
// not taken from the sync pool, and wakes exactly the waiters of the scopes a
// notification names. A waiter holds no database connection and runs no query
// while it waits: the pull handler registers it, runs its pull, and only if
// that had nothing to say waits on its channel, then pulls again. A waiter is
// also woken when the Hub's connection is lost (a notification may have been
// missed) and when the Hub stops (shutdown answers waiting pulls).
package live
