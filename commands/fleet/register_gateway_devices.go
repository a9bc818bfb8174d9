package fleet

import (
	"context"
	"errors"
	"fmt"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// RegisterGatewayDevices registers the devices a gateway reports (its
// hello, and each change of its list) in the gateway's organisation, each
// key once per gateway: a device reported again, at every reconnection,
// keeps its id. The gateway hub sends it, as a worker; it carries no
// credential (the hub authenticated the gateway).
type RegisterGatewayDevices struct {
	GatewayID string
	// GatewayName names the devices: "<gateway name>/<key>", so a site's
	// phones are told apart from the service's own and another site's.
	GatewayName string
	OrgID       string
	Devices     []GatewayDevice
}

// GatewayDevice is one device as a gateway reports it.
type GatewayDevice struct {
	// Key is the gateway's name for the device ("sim-1", "adb-<serial>");
	// the device is named after it and the gateway.
	Key string
	// Backend is the device's kind (sim or adb).
	Backend string
	Model   string
	Serial  string
	Width   int
	Height  int
}

// RegisterGatewayDevicesHandler handles RegisterGatewayDevices.
type RegisterGatewayDevicesHandler struct{ f *Fleet }

// RegisterGatewayDevices returns the handler of RegisterGatewayDevices.
func (f *Fleet) RegisterGatewayDevices() RegisterGatewayDevicesHandler {
	return RegisterGatewayDevicesHandler{f}
}

// Handle returns the id of each reported device by key, registering those
// the gateway never reported before: device.registered (naming the gateway
// and the key) with, in the same unit, the claim on the key's marker
// stream (domain.GatewayDeviceStream, whose fleet.seeded names the
// device), so a concurrent registration of one key registers one device.
// A gateway's sim phone keeps its state on the gateway: nothing is saved
// here for it. Errors: invalid_argument (no gateway or organisation, a key
// that is not printable without spaces or is longer than 128 bytes, a
// backend other than sim or adb, a key reported twice), and the
// database's; the devices registered before an error stay registered.
func (h RegisterGatewayDevicesHandler) Handle(ctx context.Context, cmd RegisterGatewayDevices) (map[string]string, error) {
	if cmd.GatewayID == "" || cmd.OrgID == "" {
		return nil, domain.Errorf(domain.CodeInvalidArgument, "a gateway and its organisation are required")
	}
	for i, gd := range cmd.Devices {
		if !domain.ValidSerial(gd.Key) {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "device key %q is not printable, has spaces or is too long", gd.Key)
		}
		if gd.Backend != domain.BackendSim && gd.Backend != domain.BackendADB {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "device %s: a gateway brings sim or adb devices, not %q", gd.Key, gd.Backend)
		}
		for _, other := range cmd.Devices[:i] {
			if other.Key == gd.Key {
				return nil, domain.Errorf(domain.CodeInvalidArgument, "device key %q is reported twice", gd.Key)
			}
		}
	}
	ids := make(map[string]string, len(cmd.Devices))
	for _, gd := range cmd.Devices {
		id, err := h.register(ctx, cmd.GatewayID, cmd.GatewayName, cmd.OrgID, gd)
		if err != nil {
			return nil, err
		}
		ids[gd.Key] = id
	}
	return ids, nil
}

// register returns the id of the device gd names, registering it if its
// marker stream does not exist yet.
func (h RegisterGatewayDevicesHandler) register(ctx context.Context, gatewayID, gatewayName, orgID string, gd GatewayDevice) (string, error) {
	marker := domain.GatewayDeviceStream(gatewayID, gd.Key)
	if id, ok, err := h.registered(ctx, marker); err != nil || ok {
		return id, err
	}
	id := domain.NewID(domain.PrefixDevice)
	name := gd.Key
	if gatewayName != "" {
		name = gatewayName + "/" + gd.Key
	}
	if r := []rune(name); len(r) > domain.MaxDeviceNameRunes {
		name = string(r[:domain.MaxDeviceNameRunes])
	}
	var d domain.Device
	evs, err := d.Register(domain.DeviceRegistered{DeviceID: id, OrgID: orgID, Name: name, Backend: gd.Backend,
		Model: gd.Model, Serial: gd.Serial, Width: gd.Width, Height: gd.Height, RegisteredAt: h.f.now(),
		GatewayID: gatewayID, GatewayKey: gd.Key})
	if err != nil {
		return "", err
	}
	news, err := eventstore.Encode(domain.Events, orgID, evs...)
	if err != nil {
		return "", err
	}
	seeded, err := eventstore.Encode(domain.Events, orgID, domain.Event(domain.FleetSeeded{OrgID: orgID, DeviceIDs: []string{id}}))
	if err != nil {
		return "", err
	}
	u := (&eventstore.Unit{}).
		Append(domain.DeviceStream(id), eventstore.NoStream, news...).
		Append(marker, eventstore.NoStream, seeded...)
	_, err = h.f.store.Commit(ctx, u)
	if errors.Is(err, eventstore.ErrConflict) {
		// A concurrent registration of the key committed first.
		id, ok, err := h.registered(ctx, marker)
		if err == nil && !ok {
			err = fmt.Errorf("gateway device marker %s: a conflict, and no device", marker)
		}
		return id, err
	}
	return id, err
}

// registered reads the device a gateway device's marker stream names.
func (h RegisterGatewayDevicesHandler) registered(ctx context.Context, marker string) (string, bool, error) {
	evs, err := h.f.store.Load(ctx, marker, 1)
	if err != nil || len(evs) == 0 {
		return "", false, err
	}
	ev, err := domain.Events.Decode(evs[0].Type, evs[0].SchemaVersion, evs[0].Data)
	if err != nil {
		return "", false, err
	}
	seeded, ok := ev.(domain.FleetSeeded)
	if !ok || len(seeded.DeviceIDs) != 1 {
		return "", false, fmt.Errorf("%s holds %s, not one device", marker, evs[0].Type)
	}
	return seeded.DeviceIDs[0], true, nil
}

// ListGatewayDevices reads the devices a gateway brings, by the gateway's
// key for each: the gateway hub records them offline when the gateway's
// tunnel ends, and the orphaned-gateway sweep when its instance died. It
// is sent as a worker and carries no credential.
type ListGatewayDevices struct {
	GatewayID string
}

// ListGatewayDevicesHandler handles ListGatewayDevices.
type ListGatewayDevicesHandler struct{ f *Fleet }

// Handle answers the device ids by key from the gateway_devices read
// model. Errors are the database's.
func (h ListGatewayDevicesHandler) Handle(ctx context.Context, q ListGatewayDevices) (map[string]string, error) {
	return projections.GatewayDeviceIDs(ctx, h.f.pool, q.GatewayID)
}
