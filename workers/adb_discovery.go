package workers

import (
	"context"
	"errors"
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

// Run tracks the server's devices until ctx ends.
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
		w.track(ctx, nudge)
	}()
	defer wg.Wait()
	tick := time.NewTicker(w.Poll)
	defer tick.Stop()
	warned := false
	for {
		list, err := w.Client.Devices(ctx)
		if ctx.Err() != nil {
			return
		}
		up := err == nil
		switch {
		case errors.Is(err, adb.ErrServerUnavailable):
			if !warned {
				w.Logger.Warn("adb discovery: no adb server; its devices are offline", "err", err)
				warned = true
			}
		case err != nil:
			w.Logger.Warn("adb discovery: listing devices failed", "err", err)
		default:
			warned = false
		}
		if up || errors.Is(err, adb.ErrServerUnavailable) {
			if err := w.Sync(workerPass(ctx, "adb-discovery"), list, up); err != nil && ctx.Err() == nil {
				w.Logger.Warn("adb discovery: recording devices failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

// track nudges at every change host:track-devices reports, reconnecting
// after Retry when the tracking connection fails, until ctx ends.
func (w ADBDiscovery) track(ctx context.Context, nudge func()) {
	for ctx.Err() == nil {
		err := w.Client.TrackDevices(ctx, func([]adb.DeviceInfo) { nudge() })
		if ctx.Err() != nil {
			return
		}
		nudge() // the server went away, or came back
		if err != nil && !errors.Is(err, adb.ErrServerUnavailable) {
			w.Logger.Warn("adb discovery: tracking devices failed", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(w.Retry):
		}
	}
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
