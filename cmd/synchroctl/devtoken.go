package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/synchro-sync/synchro/internal/auth"
	"github.com/synchro-sync/synchro/internal/config"
)

// runDevToken prints an HS256 JWT for --user, for development against a synchrod
// running with --auth-mode jwt and the same HS256 secret.
func runDevToken(_ context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	var (
		user, secret, claim string
		ttl                 time.Duration
	)
	fs := flag.NewFlagSet("synchroctl dev-token", flag.ContinueOnError)
	fs.StringVar(&user, "user", "", "user id to put in the token (required)")
	fs.StringVar(&secret, "secret", "", "HS256 secret, at least 32 bytes; prefer the env var, flags show in ps (env SYNCHRO_JWT_HS256_SECRET)")
	fs.StringVar(&claim, "claim", auth.DefaultUserClaim, "claim holding the user id (env SYNCHRO_JWT_USER_CLAIM)")
	fs.DurationVar(&ttl, "ttl", 24*time.Hour, "token lifetime")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case user == "":
		return errors.New("no user: pass --user")
	case secret == "":
		return errors.New("no secret: set SYNCHRO_JWT_HS256_SECRET or pass --secret")
	}
	tok, err := auth.MintHS256([]byte(secret), claim, user, ttl, time.Now())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, tok)
	return err
}
