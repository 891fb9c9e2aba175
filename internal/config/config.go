// Package config reads Synchro's settings from command-line flags, each with an
// environment-variable equivalent. A flag given on the command line wins over the
// environment, which wins over the flag's default.
package config

import (
	"flag"
	"fmt"
	"os"
	"sort"
)

// Parse parses args into fs, then sets every flag not given on the command line
// from its environment variable in env (flag name -> variable) when that is set.
// Names in env that fs does not define are skipped. A malformed value is an
// error naming the variable.
func Parse(fs *flag.FlagSet, args []string, env map[string]string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	names := make([]string, 0, len(env))
	for name := range env {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if given[name] || fs.Lookup(name) == nil {
			continue
		}
		if v, ok := os.LookupEnv(env[name]); ok {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("environment variable %s: %w", env[name], err)
			}
		}
	}
	return nil
}

// Common is the configuration every Synchro command shares.
type Common struct {
	DatabaseURL string
	Publication string
	Slot        string
}

// CommonEnv maps the common flags to their environment variables.
var CommonEnv = map[string]string{
	"database-url": "SYNCHRO_DATABASE_URL",
	"publication":  "SYNCHRO_PUBLICATION",
	"slot":         "SYNCHRO_SLOT",
}

// Register defines the common flags on fs.
func (c *Common) Register(fs *flag.FlagSet) {
	c.RegisterDatabase(fs)
	c.RegisterPublication(fs)
	fs.StringVar(&c.Slot, "slot", "synchro", "logical replication slot name (env SYNCHRO_SLOT)")
}

// RegisterDatabase defines --database-url alone, for commands that read the
// active stream whatever its slot and publication (synchroctl status, poison,
// registry): a --slot there would be taken and ignored.
func (c *Common) RegisterDatabase(fs *flag.FlagSet) {
	fs.StringVar(&c.DatabaseURL, "database-url", "", "PostgreSQL connection URL (env SYNCHRO_DATABASE_URL)")
}

// RegisterPublication defines --publication (synchrod, synchroctl migrate).
func (c *Common) RegisterPublication(fs *flag.FlagSet) {
	fs.StringVar(&c.Publication, "publication", "synchro", "capture publication name (env SYNCHRO_PUBLICATION)")
}

// Validate reports a missing database URL clearly.
func (c *Common) Validate() error {
	if c.DatabaseURL == "" {
		return fmt.Errorf("no database: pass --database-url or set SYNCHRO_DATABASE_URL")
	}
	return nil
}

// Merge returns the union of env maps.
func Merge(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
