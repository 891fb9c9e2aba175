package config

import (
	"flag"
	"fmt"
	"os"
	"regexp"
)

// envName finds the variable a flag's usage names.
var envName = regexp.MustCompile(`\(env ([A-Z][A-Z0-9_]*)\)`)

// EnvOf returns the environment variable flag f reads ("" when it reads none):
// the one its usage names as "(env NAME)", so that the help text and the
// variable read cannot disagree.
func EnvOf(f *flag.Flag) string {
	if m := envName.FindStringSubmatch(f.Usage); m != nil {
		return m[1]
	}
	return ""
}

// Parse parses args into fs, then sets every flag not given on the command line
// from its environment variable (EnvOf) when that is set. A malformed value is
// an error naming the variable.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) { // in name order
		name := EnvOf(f)
		if err != nil || given[f.Name] || name == "" {
			return
		}
		if v, ok := os.LookupEnv(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment variable %s: %w", name, e)
			}
		}
	})
	return err
}

// Common is the configuration every Synchro command shares.
type Common struct {
	DatabaseURL string
	Publication string
	Slot        string
}

// Register defines the common flags on fs.
func (c *Common) Register(fs *flag.FlagSet) {
	c.RegisterDatabase(fs)
	c.RegisterPublication(fs)
	fs.StringVar(&c.Slot, "slot", "synchro", "logical replication slot: created for the database's first stream, then it must be the active stream's (synchro.progress) or the worker refuses to stream (env SYNCHRO_SLOT)")
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
