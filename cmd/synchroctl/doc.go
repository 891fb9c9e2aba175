// Command synchroctl is Synchro's operator CLI:
//
//	synchroctl migrate     apply the migrations and the function bundle (idempotent)
//	synchroctl registry    list the registered relations
//	synchroctl poison      list, show or retry blocking poison transactions
//	synchroctl status      readiness checks, stream positions, lag, workers and poison
//	synchroctl client      sync a local SQLite replica with the Go SDK (demo)
//	synchroctl dev-token   mint a development JWT (HS256) for a user
//
// Each subcommand is one file (migrate.go, registry.go, poison.go, status.go,
// client.go, devtoken.go); common.go parses the flags they share. The database
// subcommands read and change Synchro's state only through the SQL of
// sql/queries (internal/db) and the function bundle's entry points
// (synchro.retry_poison); migrate goes through internal/migrate, as synchrod's
// start check does. synchroctl never writes the capture tables itself.
package main
