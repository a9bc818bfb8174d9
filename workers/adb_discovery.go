package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/adb"
)

// ADBDiscovery registers, as events, every device an adb server reports
// in one organisation, and records each adb device of that organisation
// going offline and coming back online as the server reports it
// (device.went_offline, device.came_online). While the server cannot be
// reached, every adb device of the organisation is offline.
//
// It reads the list with host:devices-l (which carries the model) when
// host:track-devices says something changed and every Poll besides: the
// adb server (1.0.41) does not tell its trackers when a device it reached
// with `adb connect` drops and it starts reconnecting — `adb devices` says
// offline, the tracker hears nothing — so tracking alone misses exactly
// the phones that leave the network.
type ADBDiscovery struct {
	Client *adb.Client
	OrgID  string
	Pool   *pgxpool.Pool
	// Register registers one serial (commands.RegisterDevices with
	// Serial, which registers each serial once).
	Register cqrs.Handler[fleet.RegisterDevices, []string]
	Record   cqrs.Handler[fleet.RecordDeviceConnection, bool]
	// Changed, when set, is told of every device whose connection changed
	// (the wiring drops the adapter's kept shell and cached capabilities).
	Changed func(deviceID string, online bool)
	// Retry is the pause before tracking again after the tracking
	// connection failed; zero means 2 s.
	Retry time.Duration
	// Poll is how often the list is read without being told of a change;
	// zero means 2 s.
	Poll   time.Duration
	Logger *slog.Logger
}

// Run tracks the server's devices until ctx ends: two passes on the one
// sweep loop, the tracking connection (made again Retry after it ends) and
// the listing (every Poll, and at once when tracking says something
// changed).
func (w ADBDiscovery) Run(ctx context.Context) {
	if w.Retry == 0 {
		w.Retry = 2 * time.Second
	}
	if w.Poll == 0 {
		w.Poll = 2 * time.Second
	}
	if w.Logger == nil {
		w.Logger = slog.Default()
	}
	changed := make(chan struct{}, 1)
	nudge := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		Sweep[struct{}]{Worker: "adb-discovery", Interval: w.Retry, AtOnce: true, Logger: w.Logger,
			Pass: func(ctx context.Context) (struct{}, error) { return struct{}{}, w.track(ctx, nudge) }}.Run(ctx)
	}()
	defer wg.Wait()
	l := &adbListing{w: w}
	Sweep[struct{}]{Worker: "adb-discovery", Interval: w.Poll, AtOnce: true, Wake: changed, Logger: w.Logger,
		Pass: func(ctx context.Context) (struct{}, error) { return struct{}{}, l.pass(ctx) }}.Run(ctx)
}

// track holds one tracking connection, nudging at every change
// host:track-devices reports, and nudges once more when it ends (the server
// went away, or came back). A server that cannot be reached is not an
// error: the listing says so.
func (w ADBDiscovery) track(ctx context.Context, nudge func()) error {
	err := w.Client.TrackDevices(ctx, func([]adb.DeviceInfo) { nudge() })
	if ctx.Err() != nil {
		return nil
	}
	nudge()
	if err != nil && !errors.Is(err, adb.ErrServerUnavailable) {
		return fmt.Errorf("adb discovery: tracking devices: %w", err)
	}
	return nil
}

// adbListing is the listing pass and what it remembers between passes.
type adbListing struct {
	w ADBDiscovery
	// warned is whether the server's absence has been logged since it was
	// last reached.
	warned bool
}

// pass reads the list and records it (Sync). While the server cannot be
// reached every adb device is recorded offline, and that is logged once.
func (l *adbListing) pass(ctx context.Context) error {
	list, err := l.w.Client.Devices(ctx)
	if ctx.Err() != nil {
		return nil
	}
	up := err == nil
	switch {
	case errors.Is(err, adb.ErrServerUnavailable):
		if !l.warned {
			l.w.Logger.Warn("adb discovery: no adb server; its devices are offline", "err", err)
			l.warned = true
		}
	case err != nil:
		return fmt.Errorf("adb discovery: listing devices: %w", err)
	default:
		l.warned = false
	}
	if err := l.w.Sync(ctx, list, up); err != nil {
		return fmt.Errorf("adb discovery: recording devices: %w", err)
	}
	return nil
}

// Sync records one device list: serials not registered yet are
// registered (model from the server's listing), and every adb device of
// the organisation is recorded online exactly when the list has it in
// state "device". serverUp false means the server could not be asked.
func (w ADBDiscovery) Sync(ctx context.Context, list []adb.DeviceInfo, serverUp bool) error {
	reported := map[string]adb.DeviceInfo{}
	for _, d := range list {
		reported[d.Serial] = d
		if !domain.ValidSerial(d.Serial) {
			continue
		}
		_, err := w.Register.Handle(ctx, fleet.RegisterDevices{OrgID: w.OrgID, Backend: domain.BackendADB, Count: 1,
			Serial: d.Serial, Model: strings.ReplaceAll(d.Model, "_", " ")})
		if err != nil {
			return err
		}
	}
	// A device registered a moment ago may be missing from the read
	// model; it starts online, and the next list records it.
	rows, err := w.Pool.Query(ctx, `SELECT device_id, serial FROM public.devices WHERE org_id = $1 AND backend = $2 AND serial <> ''`,
		w.OrgID, domain.BackendADB)
	if err != nil {
		return err
	}
	type dev struct{ id, serial string }
	var devs []dev
	for rows.Next() {
		var d dev
		if err := rows.Scan(&d.id, &d.serial); err != nil {
			rows.Close()
			return err
		}
		devs = append(devs, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, d := range devs {
		info, ok := reported[d.serial]
		state := "gone"
		if ok {
			state = info.State
		}
		if !serverUp {
			state = "adb server unreachable"
		}
		online := ok && info.Online()
		changed, err := w.Record.Handle(ctx, fleet.RecordDeviceConnection{DeviceID: d.id, Online: online, State: state})
		if err != nil {
			return err
		}
		if changed && w.Changed != nil {
			w.Changed(d.id, online)
		}
	}
	return nil
}
