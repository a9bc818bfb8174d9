package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/internal/sim"
)

// simHostLock is the advisory lock held by the one process that drives the
// sim phones of a database. Two processes driving copies of one phone would
// let them diverge, and each would take the other's in-flight actions for
// abandoned ones.
const simHostLock = "phonefleet:sim-host"

// SimHost drives the sim phones of every organisation in this process. A
// phone is restored from its saved state (table device_states) on first
// use, or created new when it has none.
type SimHost struct {
	pool *pgxpool.Pool
	// id names this process in table sim_host.
	id      string
	hosting atomic.Bool

	lockMu sync.Mutex
	// lockConn is a connection of its own, outside the pool, so that
	// closing the pool never waits for it.
	lockConn *pgx.Conn
	// epoch is the sim_host epoch of this process's last take; since is
	// the epoch its unbroken hold began with (domain.HostFence). Both are
	// guarded by lockMu.
	epoch, since int64

	mu     sync.Mutex
	phones map[string]*simSlot

	// DirectLoopback lets the phones' browsers load loopback pages
	// directly, with no network proxy set (local mode: pages a developer
	// or a test serves on this machine). Off, a browser without a proxy
	// makes every page up and never reaches the service's own machine.
	// Set before the host drives any phone.
	DirectLoopback bool
}

// NewSimHost returns a host over pool that drives nothing until TryHost
// succeeds.
func NewSimHost(pool *pgxpool.Pool) *SimHost {
	return &SimHost{pool: pool, id: uuid.Must(uuid.NewV7()).String(), phones: map[string]*simSlot{}}
}

// TryHost takes the database's sim host lock on a connection it keeps, or
// keeps it, and reports whether this process drives the sim phones and
// whether it has just taken them over. While another process holds the
// lock, sim devices answer device_unavailable (offline) here.
//
// A lock whose connection was lost (the database restarted) is taken
// again. While the database cannot be reached the process stays the host:
// no other process can take the lock then, and the device work in flight
// (an outcome waiting to be written) goes on. When it takes the lock
// again, table sim_host says whether another process held it meanwhile:
// if not, the phones and the actions in flight are still this process's,
// and it has not taken anything over; if so, its phones are dropped (they
// are restored from their saved state) and it reports a takeover, so the
// actions left unfinished get settled.
func (h *SimHost) TryHost(ctx context.Context) (hosting, tookOver bool, err error) {
	h.lockMu.Lock()
	defer h.lockMu.Unlock()
	if h.lockConn != nil {
		if err := h.lockConn.Ping(ctx); err == nil {
			return true, false, nil
		}
		// The connection, and the lock with it, is gone.
		_ = h.lockConn.Close(context.WithoutCancel(ctx))
		h.lockConn = nil
	}
	conn, err := pgx.ConnectConfig(ctx, h.pool.Config().ConnConfig.Copy())
	if err != nil {
		return h.hosting.Load(), false, err
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT claim_try_lock($1)`, simHostLock).Scan(&got); err != nil || !got {
		_ = conn.Close(context.WithoutCancel(ctx))
		if err == nil {
			h.dropLocked() // another process drives the phones now
		}
		return h.hosting.Load(), false, err
	}
	var epoch, prevEpoch int64
	var prevHolder string
	err = conn.QueryRow(ctx, `WITH prev AS (SELECT holder, epoch FROM sim_host WHERE id = 1)
		INSERT INTO sim_host (id, holder, epoch) VALUES (1, $1, 1)
		ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, epoch = sim_host.epoch + 1
		RETURNING epoch, coalesce((SELECT holder FROM prev), ''), coalesce((SELECT epoch FROM prev), 0)`, h.id).
		Scan(&epoch, &prevHolder, &prevEpoch)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return h.hosting.Load(), false, err
	}
	continuous := h.hosting.Load() && prevHolder == h.id && prevEpoch == h.epoch
	h.lockConn, h.epoch = conn, epoch
	if !continuous {
		h.since = epoch
		h.mu.Lock()
		clear(h.phones) // another process may have moved them on since
		h.mu.Unlock()
	}
	h.hosting.Store(true)
	return true, !continuous, nil
}

// Hosting reports whether this process drives the sim phones.
func (h *SimHost) Hosting() bool { return h.hosting.Load() }

// Fence returns this process's claim on the sim host as its writes carry
// it; ok is false while it does not drive the phones.
func (h *SimHost) Fence() (f domain.HostFence, ok bool) {
	h.lockMu.Lock()
	defer h.lockMu.Unlock()
	if !h.hosting.Load() {
		return domain.HostFence{}, false
	}
	return domain.HostFence{Host: domain.HostSim, Epoch: h.epoch, Since: h.since}, true
}

// Lose stops driving the phones at once: the database refused a write of
// this process's as fenced (another process holds the sim host now). The
// lock's connection is closed, so a lock still on it goes too; the
// phones are dropped and TryHost may take the host again later, as a
// takeover.
func (h *SimHost) Lose() {
	h.lockMu.Lock()
	defer h.lockMu.Unlock()
	h.dropLocked()
}

// Release gives the host lock back (at shutdown).
func (h *SimHost) Release() {
	h.lockMu.Lock()
	defer h.lockMu.Unlock()
	if h.lockConn != nil {
		_, _ = h.lockConn.Exec(context.Background(), `SELECT claim_unlock($1)`, simHostLock)
	}
	h.dropLocked()
}

func (h *SimHost) dropLocked() {
	h.hosting.Store(false)
	h.mu.Lock()
	clear(h.phones)
	h.mu.Unlock()
	if h.lockConn != nil {
		_ = h.lockConn.Close(context.Background())
		h.lockConn = nil
	}
}

// Device returns the adapter of sim device d, restoring the phone from its
// saved state the first time. A phone is restored under its own slot, not
// under the host's lock: the first beats of many phones (after a start or
// a takeover, when none is restored yet) each read their state from the
// database at once, and a phone restored already is answered meanwhile.
func (h *SimHost) Device(ctx context.Context, d *domain.Device) (*SimDevice, error) {
	for {
		if !h.Hosting() {
			return nil, offline(d.ID)
		}
		h.mu.Lock()
		slot, found := h.phones[d.ID]
		if !found {
			slot = &simSlot{ready: make(chan struct{})}
			h.phones[d.ID] = slot
		}
		h.mu.Unlock()
		if !found {
			h.restore(ctx, d, slot)
			return slot.dev, slot.err
		}
		select {
		case <-slot.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if slot.err == nil {
			return slot.dev, nil
		}
		// The restore this call waited for failed (the database, or its
		// own caller gone) and its slot is gone: restore it here.
	}
}

// simSlot is a phone of the host: restored (dev) once ready is closed, or
// failed to (err), in which case the slot has left the host's map.
type simSlot struct {
	ready chan struct{}
	dev   *SimDevice
	err   error
}

// restore restores d's phone into slot, which it has just put in the
// host's map, and keeps it there only if it succeeded and the host has not
// dropped its phones meanwhile.
func (h *SimHost) restore(ctx context.Context, d *domain.Device, slot *simSlot) {
	defer close(slot.ready)
	var model string
	var state []byte
	err := h.pool.QueryRow(ctx, `SELECT model, state FROM device_states WHERE device_id = $1`, d.ID).Scan(&model, &state)
	var p *sim.Phone
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		m := d.Model
		if m == "" {
			m = sim.DefaultModel
		}
		p, err = sim.New(m, serialOf(d))
	case err == nil:
		p, err = sim.Restore(model, state)
	}
	if err != nil {
		slot.err = domain.Errorf(domain.CodeInternal, "sim device %s cannot be loaded", d.ID).Wrap(err)
		h.mu.Lock()
		if h.phones[d.ID] == slot {
			delete(h.phones, d.ID)
		}
		h.mu.Unlock()
		return
	}
	p.AllowDirectLoopback(h.DirectLoopback)
	slot.dev = newSimDevice(p)
}

func serialOf(d *domain.Device) string {
	if d.Serial != "" {
		return d.Serial
	}
	return d.ID
}

// NewSimState returns the saved state of a brand-new sim phone for its
// registration reg (commands/fleet.Config.NewSimState): of reg's model
// (empty = sim.DefaultModel) and serial, with reg's model and screen size
// filled in from the phone. Errors: invalid_argument for an unknown model.
func NewSimState(reg *domain.DeviceRegistered) ([]byte, error) {
	model := reg.Model
	if model == "" {
		model = sim.DefaultModel
	}
	p, err := sim.New(model, reg.Serial)
	if err != nil {
		if errors.Is(err, sim.ErrUnknownModel) {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "unknown sim model %q", model)
		}
		return nil, err
	}
	st, err := p.State()
	if err != nil {
		return nil, err
	}
	m := p.Model()
	reg.Model, reg.Width, reg.Height = m.Name, m.Width, m.Height
	return st, nil
}

// SimDevice adapts one sim.Phone to domain.Backend. It also saves the
// phone's state (domain.StatefulBackend) and redraws past frames
// (domain.FrameRenderer).
type SimDevice struct {
	phone *sim.Phone
	caps  domain.Capabilities
	// snapshotSize is the length of the last UI snapshot written, the
	// room the next one is given at once (snapshot).
	snapshotSize atomic.Int64
}

// snapshot returns root as JSON (as json.Marshal writes it), written
// into a buffer of about the size of the last one, so it is seldom grown.
func (s *SimDevice) snapshot(root *sim.Element) []byte {
	out := root.AppendJSON(make([]byte, 0, s.snapshotSize.Load()*9/8+512))
	s.snapshotSize.Store(int64(len(out)))
	return out
}

func newSimDevice(p *sim.Phone) *SimDevice {
	m := p.Model()
	keys := append(sim.Keys(), "BACKSPACE", "RETURN", "RECENTS", "OVERVIEW")
	return &SimDevice{phone: p, caps: domain.Capabilities{
		Actions:    domain.ActionTypes,
		Screenshot: true, UISnapshot: true, CheapSnapshot: true, Wake: true, Stop: true, Reset: true,
		Width: m.Width, Height: m.Height, Keys: keys,
	}}
}

// Phone returns the simulated phone (tests read its state directly).
func (s *SimDevice) Phone() *sim.Phone { return s.phone }

// LiveScreen returns the phone itself as the device's live screen: it
// hashes and paints its screen without a PNG round trip.
func (s *SimDevice) LiveScreen() domain.LiveScreen { return s.phone }

// Capabilities implements domain.Backend: every action, screenshots, UI
// snapshots, wake and stop.
func (s *SimDevice) Capabilities() domain.Capabilities { return s.caps }

// Observe implements domain.Backend. A screenshot or snapshot is taken so
// that it shows the screen the returned hash names: if an input lands
// between the pieces, they are taken again. The hash and replay state alone
// need no such care: inputs reach a phone only through its device queue,
// which is also the only caller that asks for them alone.
func (s *SimDevice) Observe(_ context.Context, opts domain.ObserveOptions) (domain.Observation, error) {
	if opts.Image && (opts.Format == domain.ImageJPEG || opts.Marks != nil) {
		return s.observePicture(opts)
	}
	m := s.phone.Model()
	if !opts.Image {
		// No picture: the hash, the tree and the state all come from one
		// layout under the phone's lock (sim.Phone.Look), so they always
		// show the same screen with nothing to take again.
		l := s.phone.Look(opts.Snapshot, opts.Replay)
		obs := domain.Observation{Width: m.Width, Height: m.Height, ScreenHash: l.Hash, ScreenOn: l.ScreenOn, Replay: l.State}
		if opts.Snapshot && opts.Tree {
			tree := uiTree(&l.Root)
			obs.Tree = &tree
		} else if opts.Snapshot {
			obs.Snapshot = s.snapshot(&l.Root)
		}
		return obs, nil
	}
	for attempt := 0; ; attempt++ {
		obs := domain.Observation{Width: m.Width, Height: m.Height}
		pictures := opts.Image || opts.Snapshot
		var before string
		if pictures {
			before = s.phone.ScreenHash()
		}
		var err error
		if opts.Replay {
			if obs.Replay, err = s.phone.State(); err != nil {
				return obs, internal(err)
			}
		}
		if opts.Image {
			if opts.MaxWidth > 0 {
				obs.PNG, err = s.phone.ScreenshotScaled(opts.MaxWidth)
			} else {
				obs.PNG, err = s.phone.Screenshot()
			}
			if err != nil {
				return obs, mapSimError(err)
			}
			obs.Image, obs.ImageType = obs.PNG, "image/png"
			obs.ImageWidth, obs.ImageHeight = m.Width, m.Height
			if opts.MaxWidth > 0 && opts.MaxWidth < m.Width {
				obs.ImageWidth, obs.ImageHeight = scaledSize(m, opts.MaxWidth)
			}
		}
		if opts.Snapshot {
			root := s.phone.Snapshot()
			obs.Snapshot = s.snapshot(&root)
		}
		obs.ScreenOn = s.phone.ScreenOn()
		obs.ScreenHash = s.phone.ScreenHash()
		if !pictures || obs.ScreenHash == before || attempt == 4 {
			return obs, nil
		}
	}
}

// Act implements domain.Backend.
func (s *SimDevice) Act(_ context.Context, a domain.Action) (domain.ActionResult, error) {
	var eff sim.Effect
	var err error
	p := s.phone
	switch a.Type {
	case domain.ActionTap:
		eff, err = p.Tap(a.X, a.Y)
	case domain.ActionDoubleTap:
		eff, err = p.DoubleTap(a.X, a.Y)
	case domain.ActionLongPress:
		eff, err = p.LongPress(a.X, a.Y, a.DurationMs)
	case domain.ActionSwipe:
		eff, err = p.Swipe(a.X1, a.Y1, a.X2, a.Y2, a.DurationMs)
	case domain.ActionTypeText:
		eff, err = p.TypeText(a.Text)
	case domain.ActionKey:
		eff, err = p.PressKey(a.Key)
	case domain.ActionOpenApp:
		eff, err = p.OpenApp(a.Package)
	case domain.ActionInstallApp:
		pkg := a.Package
		if a.APK != nil {
			// The phone installs what the file names, as a real one does.
			if pkg, err = sim.ParseCatalogAPK(a.APK.Data); err == nil && pkg != a.Package {
				return domain.ActionResult{}, domain.Errorf(domain.CodeInvalidArgument, "the APK installs %s, not %s", pkg, a.Package)
			}
		}
		if err == nil {
			eff, err = p.InstallApp(pkg)
		}
	default:
		return domain.ActionResult{}, domain.Errorf(domain.CodeCapabilityUnsupported, "a sim phone cannot %s", a.Type).
			With("capability", string(a.Type))
	}
	if err != nil {
		return domain.ActionResult{}, mapSimError(err)
	}
	return domain.ActionResult{Description: eff.Description, Target: eff.Target, TargetID: eff.TargetID,
		TargetText: eff.TargetText, Changed: eff.Changed, Foreground: eff.Foreground, ScreenHash: eff.ScreenHash,
		ScreenOn: p.ScreenOn()}, nil
}

// Software implements domain.SoftwareReader: the phone's model says its
// Android release, the phone its free storage and apps.
func (s *SimDevice) Software(context.Context) (domain.DeviceSoftware, error) {
	m := s.phone.Model()
	_, free := s.phone.Storage()
	sw := domain.DeviceSoftware{OSVersion: m.AndroidVersion, SDK: sim.APILevel(m.AndroidVersion), ABIs: sim.ABIs(),
		StorageFreeBytes: &free, CanInstall: slices.Contains(s.caps.Actions, domain.ActionInstallApp), Apps: []domain.InstalledApp{}}
	for _, a := range s.phone.InstalledApps() {
		sw.Apps = append(sw.Apps, domain.InstalledApp{Package: a.Package, Version: a.Version, System: a.System})
	}
	return sw, nil
}

// Wake implements domain.Backend.
func (s *SimDevice) Wake(context.Context) error {
	_, err := s.phone.Wake()
	return mapSimError(err)
}

// Stop implements domain.Backend: the screen goes off.
func (s *SimDevice) Stop(context.Context) error {
	_, err := s.phone.ScreenOff()
	return mapSimError(err)
}

// Reset implements domain.Backend: the phone becomes a fresh one of its
// model and serial.
func (s *SimDevice) Reset(context.Context) error {
	return mapSimError(s.phone.Reset())
}

// SetNetworkProxy implements domain.NetworkProxyConfigurer: the phone's
// network settings (Settings › Network & internet › Proxy), which its
// browser loads pages through.
func (s *SimDevice) SetNetworkProxy(_ context.Context, p *domain.NetworkProxy) error {
	if p == nil {
		return mapSimError(s.phone.SetNetworkProxy(nil))
	}
	return mapSimError(s.phone.SetNetworkProxy(&sim.NetworkProxy{Host: p.Host, Port: p.Port, Username: p.Username, Password: p.Password}))
}

// SaveState implements domain.StatefulBackend.
func (s *SimDevice) SaveState() ([]byte, error) { return s.phone.State() }

// simRenderer redraws a sim frame from the phone state it was taken in.
type simRenderer struct{}

// RenderFrame implements domain.FrameRenderer.
func (simRenderer) RenderFrame(ctx context.Context, replay []byte, opts domain.ObserveOptions) (domain.Observation, error) {
	var head struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(replay, &head); err != nil {
		return domain.Observation{}, internal(err)
	}
	p, err := sim.Restore(head.Model, replay)
	if err != nil {
		return domain.Observation{}, internal(err)
	}
	opts.Replay = false
	return newSimDevice(p).Observe(ctx, opts)
}

// mapSimError turns the sim's typed refusals into domain errors (see
// domain.Backend.Act for the codes).
func mapSimError(err error) error {
	if err == nil {
		return nil
	}
	msg := simMessage(err)
	withReason := func(reason string) error {
		return domain.Errorf(domain.CodeInvalidArgument, "%s", msg).With("reason", reason).Wrap(err)
	}
	switch {
	case errors.Is(err, sim.ErrOutOfBounds):
		return withReason("out_of_bounds")
	case errors.Is(err, sim.ErrUnknownKey), errors.Is(err, sim.ErrInvalidArgument):
		return domain.Errorf(domain.CodeInvalidArgument, "%s", msg).Wrap(err)
	case errors.Is(err, sim.ErrNoFocusedField):
		return withReason("no_focused_field")
	case errors.Is(err, sim.ErrAppNotInstalled):
		return withReason("app_not_installed")
	case errors.Is(err, sim.ErrNotInCatalog):
		return withReason("not_in_catalog")
	case errors.Is(err, sim.ErrScreenOff):
		return domain.Errorf(domain.CodeDeviceUnavailable, "the screen is off; wake the device first").
			With("reason", domain.ReasonAsleep).Wrap(err)
	}
	return domain.Errorf(domain.CodeBackendCommandFailed, "the sim phone failed the command").Wrap(err)
}

// simMessage strips the sim's "sim: " prefix so the message reads as the
// service's own.
func simMessage(err error) string {
	s := err.Error()
	if len(s) > 5 && s[:5] == "sim: " {
		s = s[5:]
	}
	return s
}

func internal(err error) error {
	return domain.Errorf(domain.CodeInternal, "internal error").Wrap(fmt.Errorf("sim: %w", err))
}

var (
	_ domain.StatefulBackend = (*SimDevice)(nil)
	_ domain.FrameRenderer   = simRenderer{}
)
