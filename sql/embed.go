// Package sqlfiles embeds Synchro's SQL: the goose migrations (schema/) and the
// PL/pgSQL function bundle (functions/: one folder per area and
// functions/load_order.txt, the order internal/migrate installs the folders in).
package sqlfiles

import (
	"embed"
	"io/fs"
)

//go:embed schema/*.sql
var schema embed.FS

// The whole tree, so that internal/migrate sees (and refuses) a file outside
// the listed folders instead of leaving it out unnoticed.
//
//go:embed functions
var functions embed.FS

// Schema holds the goose migrations at its root.
func Schema() fs.FS {
	sub, err := fs.Sub(schema, "schema")
	if err != nil {
		panic(err)
	}
	return sub
}

// Functions holds the function bundle at its root: load_order.txt and the
// folders it lists.
func Functions() fs.FS {
	sub, err := fs.Sub(functions, "functions")
	if err != nil {
		panic(err)
	}
	return sub
}
