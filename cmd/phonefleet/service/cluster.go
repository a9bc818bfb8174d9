package service

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"os"

	"phonefleet/internal/cluster"
	"phonefleet/internal/identity"
)

// clusterSecretLabel derives the secret the instances sign their device
// calls with from the server pepper they share.
const clusterSecretLabel = "phonefleet cluster v1"

// wireCluster connects this instance to the others sharing its database
// over the NATS server SERVICE_NATS_URL names (issue 14); unset, it does
// nothing: one instance, and a device another process drives answers
// offline. The node serves the calls for the hosts this process holds
// (the fleet's runtime says which) and hands the fleet its way to the
// others. Calls are signed with a key derived from the server pepper
// every instance holds. An unreachable NATS server does not stop the
// start: the node keeps trying, and calls to other instances meanwhile
// answer that the device is unavailable.
func (a *App) wireCluster(ctx context.Context) error {
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
	fleet := a.capabilities.Fleet
	// The node outlives New's context: stopCluster closes it, in order.
	node, err := cluster.Start(context.WithoutCancel(ctx), cluster.Config{URL: a.cfg.NATSURL, ClusterID: id, Secret: mac.Sum(nil),
		Serve: fleet.ServeForwarded, Held: a.devices.Runtime.HeldHosts, Logger: a.logger,
		Name: fmt.Sprintf("phonefleet %s pid %d", hostname, os.Getpid())})
	if err != nil {
		return fmt.Errorf("invalid SERVICE_NATS_URL: %w", err)
	}
	fleet.SetForwarder(node)
	a.cluster = node
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
