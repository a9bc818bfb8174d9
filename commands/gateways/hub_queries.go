package gateways

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/projections"
)

// What the gateway hub and the orphaned-gateway sweep ask of the gateway
// capability, as workers: they carry no credential (the hub authenticated
// the gateway; the sweep acts for the service).

// ---- Revoked.

// GatewayRevoked asks whether a gateway has been revoked: the hub closes a
// revoked gateway's tunnel.
type GatewayRevoked struct {
	GatewayID string
}

// GatewayRevokedHandler handles GatewayRevoked.
type GatewayRevokedHandler struct{ *Gateways }

// Handle reads the gateway's stream, not a read model, so a revocation
// counts from its commit. A gateway never enrolled is not revoked. Errors
// are the database's.
func (g GatewayRevokedHandler) Handle(ctx context.Context, q GatewayRevoked) (bool, error) {
	gw, _, err := g.gateways.Load(ctx, q.GatewayID)
	if err != nil {
		return false, err
	}
	return gw.State() == domain.GatewayStateRevoked, nil
}

// ---- Gateways the records show served.

// ListGatewaysRecordedServed lists the gateways the records show served:
// those with actions recorded as requested under their host, with devices
// recorded online, or recorded connected. The orphaned-gateway sweep
// settles those among them that no instance serves (their instance died
// and their tunnel never came back).
type ListGatewaysRecordedServed struct{}

// ListGatewaysRecordedServedHandler handles ListGatewaysRecordedServed.
type ListGatewaysRecordedServedHandler struct{ *Gateways }

// Handle answers the gateways' ids, sorted, each once. Errors are the
// database's.
func (g ListGatewaysRecordedServedHandler) Handle(ctx context.Context, _ ListGatewaysRecordedServed) ([]string, error) {
	rows, err := g.pool.Query(ctx, `SELECT DISTINCT substr(host, 4) FROM action_idempotency
		WHERE state = 'requested' AND host LIKE 'gw.%' ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	open, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	online, err := projections.GatewaysWithOnlineDevices(ctx, g.pool)
	if err != nil {
		return nil, err
	}
	connected, err := projections.ConnectedGateways(ctx, g.pool)
	if err != nil {
		return nil, err
	}
	return slices.Compact(slices.Sorted(slices.Values(slices.Concat(open, online, connected)))), nil
}
