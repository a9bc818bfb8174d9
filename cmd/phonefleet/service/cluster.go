package service

import (
	"context"
	"fmt"
	"os"

	"phonefleet/commands/fleet"
	"phonefleet/internal/cluster"
	"phonefleet/internal/devices"
	"phonefleet/internal/identity"
)

// dialCluster connects this instance to the others sharing its database
// over the NATS server SERVICE_NATS_URL names (issue 14); unset, it does
// nothing: one instance, and a device another process drives answers
// offline. The node is dialled before the device runtime, which forwards
// its calls through it, and serves only once the application object
// exists (serveCluster). Calls and replies are signed with a key derived
// from the random secret the instances share in the database and the
// server pepper every instance holds (cluster.ClusterSecret). The node
// authenticates to the NATS server and checks it with the
// SERVICE_NATS_CREDS / _NKEY_SEED / _TLS_* files; a file that cannot be
// read stops the start. An unreachable NATS server, or one refusing the
// credentials, does not: the node keeps trying, and calls to other
// instances meanwhile answer that the device is unavailable.
func (a *App) dialCluster(ctx context.Context) error {
	if a.cfg.NATSURL == "" {
		return nil
	}
	id, err := cluster.ClusterID(ctx, a.db.Pool)
	if err != nil {
		return err
	}
	pepper, path, err := identity.LoadOrCreatePepper(a.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("server pepper %s: %w", path, err)
	}
	secret, err := cluster.ClusterSecret(ctx, a.db.Pool, pepper)
	if err != nil {
		return err
	}
	opts, err := cluster.Credentials{CredsFile: a.cfg.NATSCreds, NkeySeedFile: a.cfg.NATSNkeySeed,
		CAFile: a.cfg.NATSTLSCA, CertFile: a.cfg.NATSTLSCert, KeyFile: a.cfg.NATSTLSKey}.Options()
	if err != nil {
		return fmt.Errorf("invalid message bus credentials (SERVICE_NATS_CREDS, SERVICE_NATS_NKEY_SEED, SERVICE_NATS_TLS_*): %w", err)
	}
	hostname, _ := os.Hostname()
	// The node outlives New's context: stopCluster closes it, in order.
	node, err := cluster.Dial(context.WithoutCancel(ctx), cluster.Config{URL: a.cfg.NATSURL, ClusterID: id, Secret: secret,
		Logger: a.logger, Name: fmt.Sprintf("phonefleet %s pid %d", hostname, os.Getpid()), Options: opts})
	if err != nil {
		return fmt.Errorf("invalid SERVICE_NATS_URL or SERVICE_NATS_TLS_*: %w", err)
	}
	a.cluster = node
	return nil
}

// transport is the device runtime's way to the other instances: the
// cluster's node, or none.
func (a *App) transport() devices.Transport {
	if a.cluster == nil {
		return nil
	}
	return a.cluster
}

// serveCluster has the node serve the calls other instances forward for
// the hosts this process holds (the device runtime says which), each run
// by the application object's fleet handlers, as a local call is.
func (a *App) serveCluster(context.Context) error {
	if a.cluster != nil {
		a.cluster.Serve(a.devices.Runtime.HeldHosts, devices.Calls(fleet.ServedCalls(a.app.Fleet)).Serve)
	}
	return nil
}

// stopCluster closes the cluster node, if there is one: no call from
// another instance arrives after it returns, and those that did have been
// answered. Run calls it once the server has stopped and before the
// workers (the device runtime among them) stop, so that every forwarded
// call still finds the runtime that runs it.
func (a *App) stopCluster() {
	if a.cluster != nil {
		a.cluster.Close()
	}
}
