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

	"github.com/synchro-sync/synchro/internal/logging"
)

// command is one synchroctl subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error
}

var commands = map[string]command{
	"migrate":  {"apply migrations and the function bundle (idempotent)", runMigrate},
	"registry": {"registry list | reconfigure | unregister | unregister-dependency | bootstrap", runRegistry},
	"poison":   {"poison list | show ID | retry ID: blocking poison transactions", runPoison},
	"reset":    {"reset start | status | activate | abort | retire: stream reset", runReset},
	"status":   {"readiness checks, stream positions, lag, workers and poison", runStatus},
	"client":   {"client sync: sync a local SQLite replica (demo)", runClient},

	"dev-token": {"mint a development JWT (HS256) for a user", runDevToken},
}

func main() {
	log := logging.New(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	if isHelp(os.Args[1]) {
		usage(os.Stdout)
		return
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

// isHelp reports whether arg asks for help (synchroctl --help, synchroctl
// poison -h): that prints the usage on stdout and exits 0.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// helpOr returns flag.ErrHelp (exit 0) after printing usage on out when args
// asks for help, else err: the error of a subcommand whose own subcommand is
// missing or unknown.
func helpOr(args []string, out io.Writer, usage string, err error) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(out, usage)
		return flag.ErrHelp
	}
	return err
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: synchroctl <command> [flags]   (synchroctl <command> -h: its flags)\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
