// Package sqlfiles embeds Synchro's SQL: the goose migrations (schema/) and the
// PL/pgSQL function bundle (functions/).
package sqlfiles

import (
	"embed"
	"io/fs"
)

//go:embed schema/*.sql
var schema embed.FS

//go:embed functions/*.sql
var functions embed.FS

// Schema holds the goose migrations at its root.
func Schema() fs.FS {
	sub, err := fs.Sub(schema, "schema")
	if err != nil {
		panic(err)
	}
	return sub
}

// Functions holds the function bundle files at its root.
func Functions() fs.FS {
	sub, err := fs.Sub(functions, "functions")
	if err != nil {
		panic(err)
	}
	return sub
}
