package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/eventstore"
	"phonefleet/internal/config"
	"phonefleet/projections"
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	// A command may choose its own status (fulfilments reconcile: 1 for
	// differences found, 2 when nothing could be compared).
	var c interface{ ExitCode() int }
	if errors.As(err, &c) {
		return c.ExitCode()
	}
	return 1
}

const usage = `usage: phonefleet <command> [flags]

commands:
  serve                       run the service
  gateway                     serve this computer's phones to the control plane (settings: GATEWAY_* variables)
  migrate                     apply database migrations
  projections status          show each projection's position, lag, state and rebuild progress
  projections rebuild NAME    rebuild a projection from position 0 without downtime
  events tail [-follow]       print the ordered event feed
  fulfilments refund ID       the owner's refund of one phone (no webhook is sent)
  fulfilments reconcile       compare orders and fulfilments with the payment provider (exit 1: differences)
  login [-url URL] [-scopes]  sign this CLI in: approve its code in the console; the key is stored 0600
  logout                      revoke the stored key and remove it
  version                     print the version
`

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return usageError{usage}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(ctx, rest)
	case "gateway":
		return gatewayCmd(ctx, rest)
	case "migrate":
		return withOperator(ctx, "migrate", rest, nil, func(context.Context, *flag.FlagSet, *service.Operator, *slog.Logger) error {
			fmt.Fprintln(out, "migrations are up to date")
			return nil
		})
	case "projections":
		if len(rest) == 0 {
			return usageError{"usage: phonefleet projections status|rebuild NAME"}
		}
		switch rest[0] {
		case "status":
			return withOperator(ctx, "projections status", rest[1:], nil, func(ctx context.Context, _ *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
				return projectionsStatus(ctx, op.Runner, out)
			})
		case "rebuild":
			return withOperator(ctx, "projections rebuild", rest[1:], nil, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
				if fs.NArg() != 1 {
					return usageError{"usage: phonefleet projections rebuild NAME"}
				}
				return projectionsRebuild(ctx, op.Runner, fs.Arg(0), out)
			})
		}
		return usageError{"usage: phonefleet projections status|rebuild NAME"}
	case "events":
		if len(rest) == 0 || rest[0] != "tail" {
			return usageError{"usage: phonefleet events tail [-from POSITION] [-follow] [-json]"}
		}
		var follow, asJSON bool
		var from int64
		extra := func(fs *flag.FlagSet) {
			fs.BoolVar(&follow, "follow", false, "keep printing new events as they are committed")
			fs.BoolVar(&asJSON, "json", false, "print one JSON object per event")
			fs.Int64Var(&from, "from", 0, "print events after this position")
		}
		return withOperator(ctx, "events tail", rest[1:], extra, func(ctx context.Context, _ *flag.FlagSet, op *service.Operator, logger *slog.Logger) error {
			return eventsTail(ctx, op.Store, eventstore.TailOptions{After: from, Follow: follow, Logger: logger}, asJSON, out)
		})
	case "devices":
		return devicesCmd(ctx, rest, out)
	case "receipts":
		return receiptsCmd(ctx, rest, out)
	case "fulfilments":
		return fulfilmentsCmd(ctx, rest, out)
	case "login":
		return loginCmd(ctx, rest, out)
	case "logout":
		return logoutCmd(ctx, rest, out)
	case "version":
		fmt.Fprintln(out, "phonefleet", service.Version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(out, usage)
		return nil
	default:
		return usageError{fmt.Sprintf("unknown command %q\n%s", cmd, usage)}
	}
}

func loadConfig(name string, args []string, extra func(*flag.FlagSet)) (config.Config, *flag.FlagSet, error) {
	fs := flag.NewFlagSet("phonefleet "+name, flag.ContinueOnError)
	if extra != nil {
		extra(fs)
	}
	cfg, err := config.Load(fs, args, nil)
	return cfg, fs, err
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func serve(ctx context.Context, args []string) error {
	cfg, _, err := loadConfig("serve", args, nil)
	if err != nil {
		return err
	}
	logger := newLogger(cfg.LogLevel)
	slog.SetDefault(logger)
	a, err := service.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// withOperator runs an operator command against the configured database
// (or the embedded one: the service's when it runs, else started for the
// command), as internal/app wires it. The operator is closed on every way
// out of fn (errors, a cancelled context, a panic), which stops an
// embedded cluster only when no other process uses it.
func withOperator(ctx context.Context, name string, args []string, extra func(*flag.FlagSet),
	fn func(context.Context, *flag.FlagSet, *service.Operator, *slog.Logger) error) error {
	cfg, fs, err := loadConfig(name, args, extra)
	if err != nil {
		return err
	}
	logger := newLogger(map[bool]string{true: "warn", false: cfg.LogLevel}[cfg.LogLevel == "info"])
	op, err := service.OpenOperator(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer op.Close(context.WithoutCancel(ctx))
	return fn(ctx, fs, op, logger)
}

func projectionsStatus(ctx context.Context, r *projections.Runner, out io.Writer) error {
	st, err := r.Status(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tSTATE\tPOSITION\tAPPLIED\tLAG\tREBUILD")
	for _, s := range st {
		rebuild := "-"
		if b := s.Building; b != nil {
			rebuild = fmt.Sprintf("v%d at %d (%d applied, lag %d, since %s)", b.Version, b.Position, b.Applied, b.Lag, b.StartedAt.Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "%s\tv%d\t%s\t%d\t%d\t%d\t%s\n", s.Name, s.ActiveVersion, s.State, s.Position, s.Applied, s.Lag, rebuild)
		if s.LastError != "" {
			fmt.Fprintf(tw, "\t\tlast error: %s\n", s.LastError)
		}
	}
	return tw.Flush()
}

func projectionsRebuild(ctx context.Context, r *projections.Runner, name string, out io.Writer) error {
	if !contains(r.Names(), name) {
		return usageError{fmt.Sprintf("no projection named %q; have: %s", name, strings.Join(r.Names(), ", "))}
	}
	start := time.Now()
	err := r.Rebuild(ctx, name, func(s projections.Status) {
		if b := s.Building; b != nil {
			fmt.Fprintf(out, "rebuilding %s v%d: %d events applied, lag %d\n", name, b.Version, b.Applied, b.Lag)
		}
	})
	if err != nil {
		return err
	}
	st, err := r.Status(ctx)
	if err != nil {
		return err
	}
	for _, s := range st {
		if s.Name == name {
			fmt.Fprintf(out, "%s v%d took over in %s (%d events applied)\n", name, s.ActiveVersion, time.Since(start).Round(time.Millisecond), s.Applied)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// eventsTail prints the feed, one line (or JSON object) per event.
func eventsTail(ctx context.Context, store *eventstore.Store, opts eventstore.TailOptions, asJSON bool, out io.Writer) error {
	enc := json.NewEncoder(out)
	err := store.Tail(ctx, opts, func(e eventstore.Event) error {
		meta, _ := e.DecodeMetadata()
		if asJSON {
			return enc.Encode(map[string]any{"position": e.Position, "eventId": e.ID, "streamId": e.StreamID,
				"streamVersion": e.StreamVersion, "type": e.Type, "schemaVersion": e.SchemaVersion, "orgId": e.OrgID,
				"occurredAt": e.OccurredAt.UTC().Format(time.RFC3339Nano), "metadata": meta, "data": e.Data})
		}
		actor := meta.ActorKind
		if meta.ActorID != "" {
			actor += ":" + meta.ActorID
		}
		// A failed write (the reader went away) ends the tail.
		_, err := fmt.Fprintf(out, "%d\t%s\t%s\t%s@%d\t%s/v%d\t%s\t%s\n", e.Position, e.OccurredAt.UTC().Format("2006-01-02T15:04:05.000000Z"),
			e.OrgID, e.StreamID, e.StreamVersion, e.Type, e.SchemaVersion, actor, e.Data)
		return err
	})
	if held, ok := errors.AsType[*eventstore.HeldBackError](err); ok {
		return fmt.Errorf("events tail: the feed is held back by a transaction open for over a minute (older than transaction %d); events after it are not printed", held.Mark)
	}
	return err
}
