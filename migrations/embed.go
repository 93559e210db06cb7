// Package migrations holds the PostgreSQL schema as goose SQL migrations,
// embedded into the binary.
//
// Files are named NNNNN_step.sql, one logical step each, and are applied in
// version order by the goose Provider of adapters/postgres (Migrator). A
// migration, once released, is never edited: a change is a new file.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed *.sql
var files embed.FS

// FS returns the migration files (a read-only file system whose root holds
// the *.sql files).
func FS() fs.FS { return files }
