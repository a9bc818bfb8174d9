package gateways

import (
	"context"

	"phonefleet/domain"
	"phonefleet/internal/releases"
)

// RecordGatewayConnection records that an instance of the service welcomed
// a tunnel of a gateway (Connected: gateway.connected) or that one ended
// (gateway.disconnected), on the gateway's stream. The gateway hub sends
// it, as a worker, when it welcomes and drops a tunnel, and the
// orphaned-gateway sweep for a gateway whose instance is gone; it carries
// no credential (the hub authenticated the gateway).
type RecordGatewayConnection struct {
	GatewayID string
	Connected bool
	// Instance names the serving process (its gateway claims' holder id).
	// For an end it names the tunnel that ended: an end of another
	// instance's tunnel records nothing. Empty ends whichever tunnel is
	// recorded (the sweep, which holds the gateway's claim, knows none is
	// served).
	Instance string
	// Version and Channel are what the gateway's hello said; Devices how
	// many devices the tunnel serves. Only for a connection.
	Version string
	Channel string
	Devices int
	// Reason says why a tunnel ended (domain.GatewayReason…). Only for an
	// end.
	Reason string
}

// RecordGatewayConnectionHandler handles RecordGatewayConnection.
type RecordGatewayConnectionHandler struct{ *Gateways }

// Handle appends the events the gateway's state calls for and reports
// whether it appended any: a connection always records (ending first a
// tunnel still recorded as open, domain.GatewayReasonSuperseded); an end
// records only when the stream shows the tunnel open. It appends at the
// version it decided on, so of concurrent records one decides again on
// the other's result. Errors: invalid_argument (no gateway, no instance
// for a connection or no reason for an end, a version over 64 bytes, a
// malformed channel), not_found for a gateway never enrolled, and the
// database's.
func (h RecordGatewayConnectionHandler) Handle(ctx context.Context, cmd RecordGatewayConnection) (bool, error) {
	if err := cmd.validate(); err != nil {
		return false, err
	}
	now := h.now()
	_, c, err := h.gateways.Update(ctx, cmd.GatewayID, func(g *domain.Gateway) ([]domain.Event, error) {
		if g.ID == "" {
			return nil, errGatewayNotFound(cmd.GatewayID)
		}
		if cmd.Connected {
			return g.Connect(domain.GatewayConnected{Instance: cmd.Instance, Version: cmd.Version, Channel: cmd.Channel,
				Devices: cmd.Devices}, now), nil
		}
		return g.Disconnect(cmd.Instance, cmd.Reason, now), nil
	})
	return len(c.Appends) > 0, err
}

func (cmd RecordGatewayConnection) validate() error {
	switch {
	case cmd.GatewayID == "":
		return domain.Errorf(domain.CodeInvalidArgument, "a gateway is required")
	case cmd.Connected && cmd.Instance == "":
		return domain.Errorf(domain.CodeInvalidArgument, "a connection needs the instance serving it")
	case !cmd.Connected && cmd.Reason == "":
		return domain.Errorf(domain.CodeInvalidArgument, "the end of a connection needs a reason")
	case len(cmd.Version) > maxGatewayVersion:
		return domain.Errorf(domain.CodeInvalidArgument, "version must be at most %d bytes", maxGatewayVersion).With("field", "version")
	case cmd.Channel != "" && !releases.ValidChannel(cmd.Channel):
		return domain.Errorf(domain.CodeInvalidArgument, "channel must match ^[a-z0-9-]{1,32}$").With("field", "channel")
	}
	return nil
}
