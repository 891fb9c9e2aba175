// Command synchroctl is Synchro's operator CLI.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one synchroctl subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error
}

var commands = map[string]command{
	"migrate":  {"apply migrations and the function bundle (idempotent)", runMigrate},
	"registry": {"registry list: the registered relations", runRegistry},
	"poison":   {"poison list | show ID | retry ID: blocking poison transactions", runPoison},
	"status":   {"readiness checks, stream positions, lag, workers and poison", runStatus},
	"client":   {"client sync: sync a local SQLite replica (demo)", runClient},

	"dev-token": {"mint a development JWT (HS256) for a user", runDevToken},
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "synchroctl: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	if err := cmd.run(ctx, os.Args[2:], os.Stdout, log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "synchroctl %s: %v\n", os.Args[1], err)
		code := 1
		var exit exitError
		if errors.As(err, &exit) {
			code = exit.code
		}
		os.Exit(code)
	}
}

// exitError ends synchroctl with an exit status other than 1 (which means the
// command failed).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: synchroctl <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
