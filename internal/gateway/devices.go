package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/adb"
	"phonefleet/internal/backends"
	"phonefleet/internal/sim"
	"phonefleet/internal/tunnel"
)

// agentDevice is one device a gateway serves: a sim phone in this
// process or a phone behind the local adb server, driven through its
// internal/backends adapter, one call at a time.
type agentDevice struct {
	info    tunnel.DeviceInfo
	backend domain.Backend
	// lock is held by the call in progress: a channel, so that a call
	// waiting its turn can give up when the tunnel ends.
	lock chan struct{}
	// sim and state, for a sim phone, are its adapter and the file its
	// state is saved to after every call that may change it.
	sim   *backends.SimDevice
	state *stateFile
}

// agentDevices is the gateway's current device list.
type agentDevices struct {
	log        *slog.Logger
	simLatency time.Duration

	mu    sync.Mutex
	byKey map[string]*agentDevice
	// order lists the keys: sims in number order, then adb devices as
	// they came.
	order []string
	// version counts changes to the list.
	version int

	adbHost *backends.ADBHost
	// adbModels remembers the model the adb server reports per key.
	adbModels map[string]string
}

// simKey is the device key of the gateway's nth sim phone.
func simKey(n int) string { return fmt.Sprintf("sim-%d", n) }

// adbKey is the device key of the adb device serial.
func adbKey(serial string) string { return "adb-" + serial }

// openAgentDevices brings up the gateway's sim phones, each restored from
// <dataDir>/sims/<key>.state when that exists and created (and saved)
// otherwise, with serial <gatewayID>-<key>. A state file that cannot be
// read stops the gateway rather than silently replacing the phone.
func openAgentDevices(cfg AgentConfig, gatewayID string, log *slog.Logger) (*agentDevices, error) {
	s := &agentDevices{log: log, simLatency: cfg.SimLatency, byKey: map[string]*agentDevice{}, adbModels: map[string]string{}}
	if cfg.SimDevices > 0 {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, "sims"), 0o700); err != nil {
			return nil, err
		}
	}
	for n := 1; n <= cfg.SimDevices; n++ {
		key := simKey(n)
		path := filepath.Join(cfg.DataDir, "sims", key+".state")
		phone, file, err := loadSim(path, gatewayID+"-"+key)
		if err != nil {
			s.closeFiles()
			return nil, err
		}
		dev := backends.NewSimDevice(phone)
		m := phone.Model()
		d := &agentDevice{backend: dev, sim: dev, state: file, lock: make(chan struct{}, 1),
			info: tunnel.DeviceInfo{Key: key, Backend: domain.BackendSim, Model: m.Name, Serial: phone.Serial(),
				Width: m.Width, Height: m.Height, Capabilities: dev.Capabilities()}}
		s.byKey[key] = d
		s.order = append(s.order, key)
		if err := d.saveState(); err != nil {
			s.closeFiles()
			return nil, err
		}
	}
	if cfg.ADBAddr != "" {
		s.adbHost = backends.NewADBHost(adb.New(cfg.ADBAddr), nil)
	}
	return s, nil
}

// loadSim restores the sim phone saved at path, or makes a new one with
// serial when there is none, and returns it with its state file open for
// the saves.
func loadSim(path, serial string) (*sim.Phone, *stateFile, error) {
	file, state, found, err := readStateFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("sim state %s cannot be read (move it away to start that phone afresh): %w", path, err)
	}
	if !found {
		p, err := sim.New(sim.DefaultModel, serial)
		return p, file, err
	}
	var head struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(state, &head); err != nil {
		_ = file.Close()
		return nil, nil, fmt.Errorf("sim state %s cannot be read (move it away to start that phone afresh): %w", path, err)
	}
	p, err := sim.Restore(head.Model, state)
	if err != nil {
		_ = file.Close()
		return nil, nil, fmt.Errorf("sim state %s cannot be read (move it away to start that phone afresh): %w", path, err)
	}
	return p, file, nil
}

// saveState writes a sim phone's state to its file (stateFile: a killed
// gateway leaves the old state or the new, never half of one), synced to
// disk before the call that changed it answers, so that neither a killed
// process nor a power cut brings back a phone older than the receipts of
// its actions.
func (d *agentDevice) saveState() error {
	if d.sim == nil {
		return nil
	}
	st, err := d.sim.SaveState()
	if err != nil {
		return err
	}
	return d.state.save(st)
}

// list returns the devices' descriptions and the list's version.
func (s *agentDevices) list() ([]tunnel.DeviceInfo, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]tunnel.DeviceInfo, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, s.byKey[k].info)
	}
	return out, s.version
}

// get returns the device of key: device_disconnected when the gateway has
// none (an adb device that left).
func (s *agentDevices) get(key string) (*agentDevice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.byKey[key]
	if !ok {
		return nil, domain.Errorf(domain.CodeDeviceDisconnected, "the gateway has no device %q now", key).
			With("device", key).WithRetryable(true)
	}
	return d, nil
}

// syncADB reads the adb server's device list and brings the gateway's adb
// devices in line with it: a device in state "device" is added once its
// adapter has read its capabilities, one no longer listed (or the whole
// list, when the server cannot be asked) is dropped. It reports whether
// the list changed.
func (s *agentDevices) syncADB(ctx context.Context) bool {
	listed, err := s.adbHost.Client().Devices(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		s.log.Warn("adb devices cannot be listed; serving none", "err", err)
		listed = nil
	}
	online := map[string]adb.DeviceInfo{}
	for _, d := range listed {
		if d.Online() && domain.ValidSerial(d.Serial) {
			online[adbKey(d.Serial)] = d
		}
	}
	changed := false
	s.mu.Lock()
	for _, k := range slices.Clone(s.order) {
		if d := s.byKey[k]; d.info.Backend == domain.BackendADB {
			if _, ok := online[k]; !ok {
				s.removeLocked(k)
				changed = true
			}
		}
	}
	var added []adb.DeviceInfo
	for k, d := range online {
		if _, ok := s.byKey[k]; !ok {
			added = append(added, d)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(added, func(a, b adb.DeviceInfo) int { return strings.Compare(a.Serial, b.Serial) })
	for _, info := range added {
		// Probing talks to the phone: outside the list's lock.
		key := adbKey(info.Serial)
		dev, err := s.adbHost.Device(ctx, &domain.Device{ID: key, Backend: domain.BackendADB, Serial: info.Serial})
		if err != nil {
			s.log.Warn("adb device not served: it did not answer", "device", key, "err", err)
			continue
		}
		caps := dev.Capabilities()
		d := &agentDevice{backend: dev, lock: make(chan struct{}, 1),
			info: tunnel.DeviceInfo{Key: key, Backend: domain.BackendADB, Model: strings.ReplaceAll(info.Model, "_", " "),
				Serial: info.Serial, Width: caps.Width, Height: caps.Height, Capabilities: caps}}
		s.mu.Lock()
		s.byKey[key] = d
		s.order = append(s.order, key)
		s.mu.Unlock()
		changed = true
	}
	if changed {
		s.mu.Lock()
		s.version++
		s.mu.Unlock()
	}
	return changed
}

func (s *agentDevices) removeLocked(key string) {
	delete(s.byKey, key)
	s.order = slices.DeleteFunc(s.order, func(k string) bool { return k == key })
	s.adbHost.Forget(key)
}

// close waits for the calls in progress to finish (a sim's state is then
// saved) and ends the adb sessions.
func (s *agentDevices) close() {
	s.mu.Lock()
	devs := make([]*agentDevice, 0, len(s.byKey))
	for _, d := range s.byKey {
		devs = append(devs, d)
	}
	s.mu.Unlock()
	for _, d := range devs {
		d.lock <- struct{}{}
	}
	s.closeFiles()
	if s.adbHost != nil {
		s.adbHost.Close()
	}
}

// closeFiles closes the sims' state files.
func (s *agentDevices) closeFiles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.byKey {
		if d.state != nil {
			_ = d.state.Close()
		}
	}
}

// handle answers the control plane's device.* calls.
func (s *agentDevices) handle(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case tunnel.MethodObserve:
		var p tunnel.ObserveParams
		if err := decodeParams(method, params, &p); err != nil {
			return nil, err
		}
		return s.run(ctx, p.Device, method, func(d *agentDevice) (any, error) {
			obs, err := d.backend.Observe(ctx, p.Options())
			if err != nil {
				return nil, err
			}
			return tunnel.Observation(obs), nil
		})
	case tunnel.MethodAct:
		var p tunnel.ActParams
		if err := decodeParams(method, params, &p); err != nil {
			return nil, err
		}
		a, err := p.Action()
		if err != nil {
			return nil, err
		}
		if a.Ref != "" {
			// The control plane's executor resolves an element to its
			// current centre before sending; a ref reaching a phone would be
			// a tap at (0, 0).
			return nil, domain.Errorf(domain.CodeInvalidArgument, "a device action names coordinates, not an element ref").With("ref", a.Ref)
		}
		return s.run(ctx, p.Device, method, func(d *agentDevice) (any, error) {
			if d.sim != nil && s.simLatency > 0 {
				// A slow phone: the input lands only after the delay.
				select {
				case <-time.After(s.simLatency):
				case <-ctx.Done():
					return nil, tunnelGone(ctx)
				}
			}
			defer s.save(d)
			return d.backend.Act(ctx, a)
		})
	case tunnel.MethodWake, tunnel.MethodStop, tunnel.MethodReset:
		var p tunnel.DeviceParams
		if err := decodeParams(method, params, &p); err != nil {
			return nil, err
		}
		return s.run(ctx, p.Device, method, func(d *agentDevice) (any, error) {
			defer s.save(d)
			var err error
			switch method {
			case tunnel.MethodWake:
				err = d.backend.Wake(ctx)
			case tunnel.MethodStop:
				err = d.backend.Stop(ctx)
			default:
				err = d.backend.Reset(ctx)
			}
			return struct{}{}, err
		})
	case tunnel.MethodCapabilities:
		var p tunnel.DeviceParams
		if err := decodeParams(method, params, &p); err != nil {
			return nil, err
		}
		return s.run(ctx, p.Device, method, func(d *agentDevice) (any, error) {
			return d.backend.Capabilities(), nil
		})
	}
	return nil, tunnel.ErrUnknownMethod
}

// run calls fn with the device of key once no other call holds it,
// logging the call (op is its method) as it starts.
func (s *agentDevices) run(ctx context.Context, key, op string, fn func(d *agentDevice) (any, error)) (any, error) {
	d, err := s.get(key)
	if err != nil {
		return nil, err
	}
	select {
	case d.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, tunnelGone(ctx)
	}
	defer func() { <-d.lock }()
	s.log.Debug("device call", "op", op, "device", key)
	return fn(d)
}

// save saves a sim's state after a call that may have changed it. A
// failure is logged: the call's outcome stands (the phone in memory has
// changed), but a restart would bring back the older state.
func (s *agentDevices) save(d *agentDevice) {
	if err := d.saveState(); err != nil {
		s.log.Error("saving the sim state failed", "device", d.info.Key, "err", err)
	}
}

// tunnelGone is a call's error when the tunnel ended while it waited.
func tunnelGone(ctx context.Context) error {
	return domain.Errorf(domain.CodeDeviceDisconnected, "the gateway's tunnel closed").WithRetryable(true).Wrap(ctx.Err())
}

func decodeParams(method string, params json.RawMessage, v any) error {
	if err := json.Unmarshal(params, v); err != nil {
		return domain.Errorf(domain.CodeInvalidArgument, "%s: the params are not the expected object", method).Wrap(err)
	}
	return nil
}
