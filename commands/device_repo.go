package commands

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// deviceRepo loads device aggregates. It keeps each registered device's
// state in memory and catches up from its stream on every load (one
// indexed read of the events after the cached version), so a load is cheap
// however long the stream and still sees other instances' appends.
type deviceRepo struct {
	store   *eventstore.Store
	mu      sync.Mutex
	entries map[string]*deviceEntry
}

type deviceEntry struct {
	mu sync.Mutex
	d  domain.Device
}

func newDeviceRepo(store *eventstore.Store) *deviceRepo {
	return &deviceRepo{store: store, entries: map[string]*deviceEntry{}}
}

// load returns the device's current state (unregistered when the stream
// is empty).
func (r *deviceRepo) load(ctx context.Context, id string) (domain.Device, error) {
	r.mu.Lock()
	e, ok := r.entries[id]
	if !ok {
		e = &deviceEntry{}
		r.entries[id] = e
	}
	r.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	evs, err := r.store.Load(ctx, domain.DeviceStream(id), e.d.Version+1)
	if err != nil {
		return domain.Device{}, err
	}
	for _, ev := range evs {
		de, err := domain.Events.Decode(ev.Type, ev.SchemaVersion, ev.Data)
		if err != nil {
			return domain.Device{}, fmt.Errorf("device %s: %w", id, err)
		}
		e.d.Apply(de, ev.StreamVersion)
	}
	if !e.d.Registered() {
		// Do not remember ids that name nothing (clients can send any).
		r.mu.Lock()
		delete(r.entries, id)
		r.mu.Unlock()
		return domain.Device{ID: id}, nil
	}
	return cloneDevice(e.d), nil
}

func cloneDevice(d domain.Device) domain.Device {
	if d.Lease != nil {
		l := *d.Lease
		d.Lease = &l
	}
	return d
}

// deviceConflictRetries bounds the load–decide–append loop of one command.
const deviceConflictRetries = 8

// update runs the load–decide–append loop on a device's stream: decide sees
// the current state and returns the events to append at exactly that
// version; when another writer got there first, it runs again on the new
// state. It returns the state after the append.
func (r *deviceRepo) update(ctx context.Context, id string, m eventstore.Metadata,
	decide func(d *domain.Device) ([]domain.Event, error)) (domain.Device, eventstore.Appended, error) {
	return r.updateTx(ctx, id, m, decide, nil)
}

// updateTx is update with also, when not nil, run in the append's
// transaction (to write a command-side row with the events).
func (r *deviceRepo) updateTx(ctx context.Context, id string, m eventstore.Metadata,
	decide func(d *domain.Device) ([]domain.Event, error), also func(tx pgx.Tx) error) (domain.Device, eventstore.Appended, error) {
	for attempt := 0; ; attempt++ {
		d, err := r.load(ctx, id)
		if err != nil {
			return d, eventstore.Appended{}, err
		}
		evs, err := decide(&d)
		if err != nil || len(evs) == 0 {
			return d, eventstore.Appended{}, err
		}
		news, err := fleetEncode(d.OrgID, m, evs...)
		if err != nil {
			return d, eventstore.Appended{}, err
		}
		var a eventstore.Appended
		if also == nil {
			a, err = r.store.Append(ctx, domain.DeviceStream(id), d.Version, news...)
		} else {
			err = r.store.InTx(ctx, func(tx pgx.Tx) error {
				var err error
				if a, err = r.store.AppendTx(ctx, tx, domain.DeviceStream(id), d.Version, news...); err != nil {
					return err
				}
				return also(tx)
			})
		}
		if errors.Is(err, eventstore.ErrConflict) && attempt < deviceConflictRetries {
			continue
		}
		if err != nil {
			return d, a, err
		}
		for i, e := range evs {
			d.Apply(e, a.Version-int64(len(evs)-1-i))
		}
		return d, a, nil
	}
}
