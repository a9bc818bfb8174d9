package provisioning

import (
	"context"
	"errors"
	"fmt"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
)

// The shared pay-as-you-go pool (spec 1 capability 1, 4.5 POST
// /v1/devices/take; domain/pool.go): taking a unit, and giving back the
// units whose lease has ended.

// TakePoolDevice takes a pay-as-you-go device out of the shared pool for
// the caller's organisation (POST /v1/devices/take).
type TakePoolDevice struct {
	Auth domain.Auth
	// TTLSeconds is the time-to-live of the lease handed over; 0 means the
	// default (as POST /v1/devices/{deviceId}/lease).
	TTLSeconds int
	// IdempotencyKey is the Idempotency-Key header; empty when none was
	// sent. A repeat within 24 hours answers the first take again.
	IdempotencyKey string
}

// TakenPoolDevice is a unit of the pool handed to the caller: the device,
// now the organisation's, and the caller's lease on it.
type TakenPoolDevice struct {
	Device projections.DeviceView
	Lease  projections.LeaseView
	// Replayed is set when the answer is an earlier take's, repeated for
	// its Idempotency-Key (the Idempotent-Replayed header).
	Replayed bool
}

// ReturnPoolDevices gives back to the pool every lent unit that is due
// (domain.PoolReturnDue): no lease is in force on its device any more, or
// its organisation lost pay-as-you-go access. The pool-returns worker sends
// it on every pass; it answers how many units it put back.
type ReturnPoolDevices struct{}

// ReasonPoolReturned is the reason recorded when a pool device is retired
// from the organisation because its unit went back to the pool.
const ReasonPoolReturned = "pool_returned"

// poolAggregate folds the shared pool's stream. It is loaded by every take
// and every return pass and only grows, so its state is cached and caught
// up on each load.
var poolAggregate = eventstore.Aggregate[domain.Pool, domain.Event]{
	Stream: domain.PoolStream,
	Codec:  domain.Events,
	New:    func(string) domain.Pool { return domain.NewPool() },
	Apply:  func(p *domain.Pool, e domain.Event, at eventstore.Recorded) { p.Apply(e, at.Version) },
	OrgID:  func(p *domain.Pool) string { return p.OrgID },
	Clone:  domain.Pool.Clone,
}

// poolPart is the pool's part of provisioning: the capability and the
// repository of the pool stream, made once per application object.
type poolPart struct {
	p     *Provisioning
	loans *eventstore.Repository[domain.Pool, domain.Event]
}

func newPoolPart(p *Provisioning) *poolPart {
	return &poolPart{p: p, loans: eventstore.NewRepository(p.store, poolAggregate)}
}

// TakePoolDeviceHandler handles TakePoolDevice.
type TakePoolDeviceHandler struct{ *poolPart }

// Handle lends a unit of the pool to the caller's organisation: in one
// append, pool.device_taken on the pool stream, and a new sim device
// registered for the organisation with the caller's lease on it (its
// saved state beside them), so a unit is never out without a device, nor
// a pool device without the lease whose end returns it.
//
// It needs devices:lease and a person: a signed-in session or an OAuth app
// acting for one. An API key is refused with permission_denied, since
// pay-as-you-go is never available to a key (spec 4.1 rule 5; taking a
// unit starts metered charges). Then, in order: invalid_argument (a
// malformed Idempotency-Key); service_unavailable when the deployment has
// no pool; invalid_argument (ttlSeconds); the Idempotency-Key's earlier
// take: replayed, or idempotency_conflict for another request; forbidden
// without pay-as-you-go access; fleet_at_capacity at the organisation's
// limit and device_unavailable (reason pool_exhausted) with every unit
// out, both retryable with retryAfterMs.
//
// The key's earlier take, the access and the pool are decided at one
// version of the pool stream and of the organisation's billing account
// (the unit expects the account where it was read): a take racing the end
// of pay-as-you-go access, or another take with the same key, decides
// again on what won. The answer is built from the take's own events
// (takenAnswer), after the device and lease read models applied them.
func (pp TakePoolDeviceHandler) Handle(ctx context.Context, cmd TakePoolDevice) (TakenPoolDevice, error) {
	p, auth := pp.p, cmd.Auth
	if err := auth.Require(domain.ScopeDevicesLease); err != nil {
		return TakenPoolDevice{}, err
	}
	if auth.Kind == domain.PrincipalAPIKey {
		return TakenPoolDevice{}, domain.Errorf(domain.CodePermissionDenied,
			"pay-as-you-go is not available to an API key; take a pool device signed in, or through an OAuth app")
	}
	if cmd.IdempotencyKey != "" {
		if err := domain.CheckCheckoutKey(cmd.IdempotencyKey); err != nil {
			return TakenPoolDevice{}, err
		}
	}
	pool := p.cfg.Catalog.Pool
	if pool == nil || pool.Size <= 0 || p.cfg.Devices == nil {
		return TakenPoolDevice{}, domain.Errorf(domain.CodeServiceUnavailable, "this deployment has no pay-as-you-go pool")
	}
	ttl, err := domain.CheckLeaseTTL(cmd.TTLSeconds)
	if err != nil {
		return TakenPoolDevice{}, err
	}
	key, request := domain.DigestKey(cmd.IdempotencyKey), domain.TakeDigest(ttl)
	skuName := pool.Sku
	if s, ok := p.cfg.Catalog.Sku(pool.Sku); ok {
		skuName = s.Name
	}
	now := p.now()
	holder := domain.HolderOf(auth)
	deviceID, leaseID := domain.NewID(domain.PrefixDevice), domain.NewID(domain.PrefixLease)
	var replayed string
	_, _, err = pp.loans.UpdateWith(ctx, domain.PoolStreamID, func(s *domain.Pool, u *eventstore.Unit) ([]domain.Event, error) {
		replayed = ""
		if use, replay, err := s.UseKey(auth.OrgID, key, request, now); err != nil || replay {
			replayed = use.DeviceID
			return nil, err
		}
		account, version, err := p.accounts.Load(ctx, auth.OrgID)
		if err != nil {
			return nil, err
		}
		if !account.PaygActive() {
			return nil, domain.Errorf(domain.CodeForbidden,
				"the organisation has no pay-as-you-go access; start it with a pay-as-you-go checkout (POST /v1/checkout-sessions, billing payg)")
		}
		// Access is decided on the account at this version: an end of
		// access committed first makes this unit conflict and decide again.
		u.Expect(domain.AccountStream(auth.OrgID), version)
		evs, err := s.Take(domain.PoolTake{OrgID: auth.OrgID, By: domain.ActorOf(auth), Sku: pool.Sku, Size: pool.Size,
			Limit: p.cfg.PaygDeviceLimit, DeviceID: deviceID, LeaseID: leaseID, Now: now,
			IdempotencyKey: key, RequestDigest: request,
			LeaseEnds: func(id string) (time.Time, error) { return pp.leaseEnds(ctx, id, now) }})
		if err != nil {
			return nil, err
		}
		if err := pp.lend(u, auth.OrgID, deviceID, domain.PoolDeviceName(skuName), leaseID, holder, ttl, now); err != nil {
			return nil, err
		}
		return evs, nil
	})
	if err != nil {
		return TakenPoolDevice{}, err
	}
	if replayed != "" {
		t, err := pp.takenAnswer(ctx, replayed)
		t.Replayed = true
		return t, err
	}
	return pp.takenAnswer(ctx, deviceID)
}

// takenAnswer is the answer of the take that lent deviceID, the same on
// every call: the lease it handed over and the device as the devices read
// model showed it right after the take, both folded from the first events
// of the device's stream (its registration and the lease, which the take
// appended), so a repeat of the take with its Idempotency-Key answers
// exactly what the take did, even once the lease has ended or the device
// has gone back to the pool. It returns once the device and lease read
// models have applied the take (read-your-writes).
func (pp *poolPart) takenAnswer(ctx context.Context, deviceID string) (TakenPoolDevice, error) {
	evs, err := pp.p.store.Load(ctx, domain.DeviceStream(deviceID), 1)
	if err != nil {
		return TakenPoolDevice{}, err
	}
	if len(evs) < 2 {
		return TakenPoolDevice{}, fmt.Errorf("pool device %s: its stream holds %d events, not its registration and lease", deviceID, len(evs))
	}
	var d domain.Device
	for _, e := range evs[:2] {
		ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			return TakenPoolDevice{}, err
		}
		d.Apply(ev, e.StreamVersion)
	}
	if d.Lease == nil {
		return TakenPoolDevice{}, fmt.Errorf("pool device %s: its second event is %s, not its lease", deviceID, evs[1].Type)
	}
	at := eventstore.Appended{LastPosition: evs[1].Position, TransactionID: evs[1].TransactionID}
	if err := cqrs.Await(ctx, pp.p.cfg.ReadModels, at, projections.DevicesName, projections.LeasesName); err != nil {
		return TakenPoolDevice{}, err
	}
	return TakenPoolDevice{Device: projections.TakenDeviceView(&d, evs[1].OccurredAt), Lease: projections.LeaseViewOf(d.Lease)}, nil
}

// lend adds to u the registration of a new sim device for orgID, of the
// pool's sku's model (Catalog.SimModel), and the lease for holder on it (one append on the device's new stream), and its
// starting state. Each take lends a fresh phone:
// nothing one organisation did on a unit reaches the next.
func (pp *poolPart) lend(u *eventstore.Unit, orgID, deviceID, name, leaseID string, holder domain.Actor, ttl time.Duration,
	now time.Time) error {
	reg := domain.DeviceRegistered{DeviceID: deviceID, OrgID: orgID, Name: name, Backend: domain.BackendSim,
		Model: pp.p.cfg.Catalog.SimModel(pp.p.cfg.Catalog.Pool.Sku), RegisteredAt: now}
	_, err := pp.p.cfg.Devices.RegisterInto(u, reg, func(d *domain.Device) ([]domain.Event, error) {
		return d.AcquireLease(now, holder, leaseID, ttl)
	})
	return err
}

// leaseEnds returns when the lease in force on a lent device ends, or the
// zero time when none is.
func (pp *poolPart) leaseEnds(ctx context.Context, deviceID string, now time.Time) (time.Time, error) {
	d, _, err := pp.p.cfg.Devices.State(ctx, deviceID)
	if err != nil {
		return time.Time{}, err
	}
	if l := d.ActiveLease(now); l != nil {
		return l.ExpiresAt, nil
	}
	return time.Time{}, nil
}

// ReturnPoolDevicesHandler handles ReturnPoolDevices.
type ReturnPoolDevicesHandler struct{ *poolPart }

// Handle puts back every lent unit that is due. Each unit goes back in
// one append: device.retired on its device (after the end of any lease on
// it, at the version the decision saw), and pool.device_returned on the
// pool stream. So a unit is never back in the pool while its device is
// still the organisation's, nor the device gone with the unit still out,
// whatever stops the pass; and of passes running at once (several
// instances), one records each return and the others find it done. A lease
// acquired on the device between the decision and the append makes the
// append conflict; the unit is then decided again, and stays out.
func (pp ReturnPoolDevicesHandler) Handle(ctx context.Context, _ ReturnPoolDevices) (int, error) {
	p := pp.p
	if p.cfg.Devices == nil {
		return 0, nil
	}
	s, _, err := pp.loans.Load(ctx, domain.PoolStreamID)
	if err != nil {
		return 0, err
	}
	access := map[string]bool{}
	returned := 0
	var errs []error
	for _, loan := range s.Loans() {
		active, known := access[loan.OrgID]
		if !known {
			account, _, err := p.accounts.Load(ctx, loan.OrgID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			active = account.PaygActive()
			access[loan.OrgID] = active
		}
		ok, err := pp.giveBack(eventstore.CausedBy(ctx, loan.DeviceID), loan.DeviceID, active)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			returned++
		}
	}
	return returned, errors.Join(errs...)
}

// giveBack puts the unit lent as deviceID back if it is still out and its
// return is due (paygActive: its organisation's access); it reports
// whether this call recorded the return.
func (pp *poolPart) giveBack(ctx context.Context, deviceID string, paygActive bool) (bool, error) {
	_, c, err := pp.loans.UpdateWith(ctx, domain.PoolStreamID, func(s *domain.Pool, u *eventstore.Unit) ([]domain.Event, error) {
		loan, out := s.Out[deviceID]
		if !out {
			return nil, nil
		}
		now := pp.p.now()
		var reason string
		var due bool
		err := pp.p.retireDevice(ctx, u, deviceID, ReasonPoolReturned, now, func(d *domain.Device) bool {
			reason, due = domain.PoolReturnDue(d.ActiveLease(now) != nil, paygActive)
			return due && d.OrgID == loan.OrgID
		})
		if err != nil || !due {
			return nil, err
		}
		return s.Return(deviceID, reason, now), nil
	})
	if err != nil {
		return false, err
	}
	return len(c.Appends) > 0, nil
}
