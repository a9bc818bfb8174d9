package service

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"

	"phonefleet/commands"
	"phonefleet/commands/checkpoints"
	"phonefleet/commands/fleet"
	"phonefleet/commands/provisioning"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/backends"
	"phonefleet/internal/config"
	"phonefleet/internal/payments"
	"phonefleet/projections"
)

// Operator is the program as the operator commands of cmd/phonefleet see
// it: the database opened and migrated as the service opens it, the event
// store and projection runner built as the service builds them, and the
// application object over the capabilities an operator command uses.
//
// The fleet is the service's (fleetwire.New) without its device runtime:
// an operator command registers devices and drives none, so it must not
// take the devices' host claim or mark unfinished actions as the service
// does when it starts. The operator runs no workers, subscribers or relay.
type Operator struct {
	Store  *eventstore.Store
	Runner *projections.Runner
	// App is the application object; capabilities the operator does not
	// wire answer service_unavailable.
	App commands.Application
	db  *DB
}

// OpenOperator opens the database of cfg (the embedded cluster when no
// DATABASE_URL is set: the service's, when it runs, else started for the
// command) and wires the operator's view of the program over it. Close
// releases everything; call it on every way out of the command.
func OpenOperator(ctx context.Context, cfg config.Config, logger *slog.Logger) (*Operator, error) {
	db, err := OpenDB(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	store, runner, err := storeAndRunner(db, logger)
	if err != nil {
		db.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	// The operator's fleet registers and retires devices and drives none;
	// its provisioning refunds (ending the runs on the device it retires)
	// and reconciles, waiting for no read model
	// (the service may not be running: a command that reads one brings it
	// up to date itself).
	fleet := fleet.New(fleet.Config{Store: store, NewSimState: backends.NewSimState})
	var provider payments.Provider
	if cfg.StripeSecretKey != "" {
		provider = payments.New(payments.Config{SecretKey: cfg.StripeSecretKey, APIBase: cfg.StripeAPIBase})
	}
	// Receipt signing keys are sealed with the service's server key, read
	// from the same data directory; an operator without it (another data
	// directory) rotates nothing, and creates no key of its own.
	var box *domain.SecretBox
	if key, err := readWebhookKey(filepath.Join(cfg.DataDir, WebhookKeyFile)); err == nil {
		if box, err = domain.NewSecretBox(key); err != nil {
			db.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		db.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return &Operator{Store: store, Runner: runner, db: db, App: commands.NewApplication(commands.Capabilities{
		Fleet:       fleet,
		Checkpoints: &checkpoints.Checkpoints{Store: store, Pool: db.Pool, Box: box},
		Provisioning: provisioning.New(provisioning.Config{Store: store, Devices: fleet, Payments: provider,
			Runs: runs.New(runs.Config{Store: store, Devices: fleet})}),
		Logger: logger.With("component", "application"),
	})}, nil
}

// Context returns ctx carrying the operator's event metadata (actor
// operator "phonefleet-cli", a fresh request id): run each operator
// command's writes with it.
func (o *Operator) Context(ctx context.Context) context.Context {
	return eventstore.WithMetadata(ctx, eventstore.Metadata{ActorKind: "operator", ActorID: "phonefleet-cli",
		RequestID: domain.NewID(domain.PrefixRequest)})
}

// Close closes the database and ends the command's use of the embedded
// cluster, if any: a cluster the service (or another command) still uses
// keeps running; one that only this command used, and that a phonefleet
// process started, is stopped (see DB.Close).
func (o *Operator) Close(ctx context.Context) { o.db.Close(ctx) }

// storeAndRunner builds the event store over db (upcasting every read
// through domain.Events, concurrent commits grouped) and the projection
// runner over Projections(), as the service and the operator commands both
// use them.
func storeAndRunner(db *DB, logger *slog.Logger) (*eventstore.Store, *projections.Runner, error) {
	store := eventstore.New(db.Pool, eventstore.WithUpcaster(domain.Events), eventstore.WithGroupCommit())
	runner, err := projections.NewRunner(store, logger, Projections())
	return store, runner, err
}
