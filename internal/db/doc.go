// Package db is the Go side of the SQL that Go runs: the code sqlc generates
// (`go tool sqlc generate`, make generate) from the queries of sql/queries,
// checked against the schema (sql/schema) and the function bundle
// (sql/functions). Every file but this one is generated: edit the .sql query and
// regenerate, never the Go code.
//
// A query belongs here when sqlc can express it; Go builds no SQL text for
// these statements, and no statement is written twice. The package holds no
// logic beyond scanning rows into Go values.
package db
