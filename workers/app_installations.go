package workers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/apps"
	"phonefleet/commands/cqrs"
	"phonefleet/internal/clock"
)

// AppWork does the app store's and app library's device work: every
// Interval it reads the devices that tracked requests (installations,
// inventory refreshes) still have queued, oldest first, and sends
// RunDeviceWork for each. A device leased by someone else stays queued
// and is tried again at the next pass, so an installation waits for the
// lease as an action would. A device left installing or reading for
// StaleAfter (by the injected clock: a process stopped midway) is sent
// again with Resume. Two instances may both send for one device:
// the request's stream records its start once, and the install action's
// idempotency key acts once.
type AppWork struct {
	Work cqrs.Handler[apps.RunDeviceWork, string]
	Pool *pgxpool.Pool
	// Now is the clock that decides what is stale; nil means clock.Now.
	Now func() time.Time
	// StaleAfter is how long a device may stay installing or reading
	// before its work is resumed; zero means ten minutes (an install
	// holds its lease for five).
	StaleAfter time.Duration
	// Interval between passes; zero means half a second.
	Interval time.Duration
	Logger   *slog.Logger
}

// AppWorkDone is what a pass did: each device sent and the state it was
// left in.
type AppWorkDone struct {
	Devices []apps.RunDeviceWork
	States  []string
}

func (w AppWork) sweep() Sweep[AppWorkDone] {
	return Sweep[AppWorkDone]{Worker: "app_work", Interval: w.Interval, Default: 500 * time.Millisecond, AtOnce: true,
		Logger: w.Logger, Pass: w.pass}
}

// Run makes passes until ctx ends.
func (w AppWork) Run(ctx context.Context) { w.sweep().Run(ctx) }

// RunOnce makes one pass.
func (w AppWork) RunOnce(ctx context.Context) (AppWorkDone, error) { return w.sweep().Once(ctx) }

func (w AppWork) pass(ctx context.Context) (AppWorkDone, error) {
	var done AppWorkDone
	now, stale := clock.Now, w.StaleAfter
	if w.Now != nil {
		now = w.Now
	}
	if stale <= 0 {
		stale = 10 * time.Minute
	}
	rows, err := w.Pool.Query(ctx, `SELECT org_id, request_key, device_id, state <> 'queued' FROM public.app_request_devices
		WHERE state = 'queued' OR (state IN ('installing', 'reading') AND updated_at < $2)
		ORDER BY updated_at, request_key, position LIMIT $1`, sweepBatch, now().Add(-stale))
	if err != nil {
		return done, err
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (apps.RunDeviceWork, error) {
		var c apps.RunDeviceWork
		err := r.Scan(&c.OrgID, &c.RequestKey, &c.DeviceID, &c.Resume)
		return c, err
	})
	if err != nil {
		return done, err
	}
	var first error
	for _, c := range due {
		state, err := w.Work.Handle(ctx, c)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		done.Devices = append(done.Devices, c)
		done.States = append(done.States, state)
	}
	return done, first
}
