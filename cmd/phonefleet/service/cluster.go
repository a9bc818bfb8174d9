package service

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"os"

	"phonefleet/commands/fleet"
	"phonefleet/internal/cluster"
	"phonefleet/internal/devices"
	"phonefleet/internal/identity"
)

// clusterSecretLabel derives the secret the instances sign their device
// calls with from the server pepper they share.
const clusterSecretLabel = "phonefleet cluster v1"

// dialCluster connects this instance to the others sharing its database
// over the NATS server SERVICE_NATS_URL names (issue 14); unset, it does
// nothing: one instance, and a device another process drives answers
// offline. The node is dialled before the device runtime, which forwards
// its calls through it, and serves only once the application object
// exists (serveCluster). Calls are signed with a key derived from the
// server pepper every instance holds. An unreachable NATS server does not
// stop the start: the node keeps trying, and calls to other instances
// meanwhile answer that the device is unavailable.
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
	mac := hmac.New(sha256.New, pepper)
	mac.Write([]byte(clusterSecretLabel))
	hostname, _ := os.Hostname()
	// The node outlives New's context: stopCluster closes it, in order.
	node, err := cluster.Dial(context.WithoutCancel(ctx), cluster.Config{URL: a.cfg.NATSURL, ClusterID: id, Secret: mac.Sum(nil),
		Logger: a.logger, Name: fmt.Sprintf("phonefleet %s pid %d", hostname, os.Getpid())})
	if err != nil {
		return fmt.Errorf("invalid SERVICE_NATS_URL: %w", err)
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
