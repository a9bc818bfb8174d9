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
	"phonefleet/projections"
)

const serveHelp = `usage: phonefleet serve

Runs the service: the REST API under /v1, MCP at /mcp, the device surface
under /vrx, the console at /. Local mode (the default) binds loopback only,
starts sim phones and, without DATABASE_URL, its own PostgreSQL under the
data directory. SIGINT, SIGTERM or SIGHUP shut it down gracefully.`

const migrateHelp = `usage: phonefleet migrate

Applies the database migrations (the service applies them at start too).`

const projectionsStatusHelp = `usage: phonefleet projections status

Shows each read model (projection): its active version, state (live,
rebuilding, failing), position, events applied, lag behind the event log,
a rebuild's progress, and its last error.`

const projectionsRebuildHelp = `usage: phonefleet projections rebuild NAME

Rebuilds the read model NAME from position 0 beside the live one, which
keeps answering; once it has caught up, one transaction swaps it in and
every serving instance follows. projections status lists the names.`

const eventsTailHelp = `usage: phonefleet events tail [-from POSITION] [-follow] [-json]

Prints the ordered event feed, for auditors: one line per event (position,
time, organisation, stream@version, type/schema version, actor, data), or
one JSON object per event with -json. The feed is gap-safe: an event is
printed only once no transaction that could commit before it is open.`

// serveCmd runs `phonefleet serve`.
func serveCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	cfg, fs, err := loadConfig(c, args, out, nil)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{c.help}
	}
	logger := newLogger(cfg.LogLevel)
	slog.SetDefault(logger)
	a, err := service.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// migrateCmd runs `phonefleet migrate`.
func migrateCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	return withOperator(ctx, c, args, out, nil, func(context.Context, *flag.FlagSet, *service.Operator, *slog.Logger) error {
		_, err := fmt.Fprintln(out, "migrations are up to date")
		return err
	})
}

// projectionsStatusCmd runs `phonefleet projections status`.
func projectionsStatusCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	return withOperator(ctx, c, args, out, nil, func(ctx context.Context, _ *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		return projectionsStatus(ctx, op.Runner, out)
	})
}

// projectionsRebuildCmd runs `phonefleet projections rebuild NAME`.
func projectionsRebuildCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	return withOperator(ctx, c, args, out, nil, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		if fs.NArg() != 1 {
			return usageError{c.help}
		}
		return projectionsRebuild(ctx, op.Runner, fs.Arg(0), out)
	})
}

// eventsTailOptions are the flags of `phonefleet events tail`.
type eventsTailOptions struct {
	from           int64
	follow, asJSON bool
}

func (o *eventsTailOptions) register(fs *flag.FlagSet) {
	fs.Int64Var(&o.from, "from", 0, "print the events after this position")
	fs.BoolVar(&o.follow, "follow", false, "keep printing new events as they are committed")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object per event")
}

// eventsTailCmd runs `phonefleet events tail`.
func eventsTailCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	var o eventsTailOptions
	return withOperator(ctx, c, args, out, o.register, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, logger *slog.Logger) error {
		if fs.NArg() > 0 {
			return usageError{c.help}
		}
		return eventsTail(ctx, op.Store, eventstore.TailOptions{After: o.from, Follow: o.follow, Logger: logger}, o.asJSON, out)
	})
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// withOperator runs operator command c against the configured database
// (or the embedded one: the service's when it runs, else started for the
// command), as the service wires it. The operator is closed on every way
// out of fn (errors, a cancelled context, a panic), which stops an
// embedded cluster only when no other process uses it.
func withOperator(ctx context.Context, c cliCommand, args []string, out io.Writer, extra func(*flag.FlagSet),
	fn func(context.Context, *flag.FlagSet, *service.Operator, *slog.Logger) error) error {
	cfg, fs, err := loadConfig(c, args, out, extra)
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
