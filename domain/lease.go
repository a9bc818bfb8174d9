package domain

import "time"

// Lease bounds on the time-to-live a client may ask for.
const (
	DefaultLeaseTTL = 5 * time.Minute
	MinLeaseTTL     = 10 * time.Second
	MaxLeaseTTL     = time.Hour
)

// Lease is exclusive use of one device by one actor until ExpiresAt. Its
// FencingToken is larger than that of every earlier lease of the device,
// so work carrying an older token can be refused.
type Lease struct {
	ID           string
	DeviceID     string
	FencingToken int64
	Holder       Actor
	AcquiredAt   time.Time
	ExpiresAt    time.Time
	// ResetOnRelease asks for a clean hand-over: when the lease ends
	// (released, expired or given up), the device is reset to its baseline
	// before anyone can lease it again.
	ResetOnRelease bool
}

// ReasonResetting is the device_unavailable reason while a device owes a
// reset (a lease with resetOnRelease ended and the reset has not been
// recorded yet); it is retryable.
const ReasonResetting = "resetting"

// LeaseOptions are the options of a lease asked for with AcquireLeaseWith.
type LeaseOptions struct {
	// ResetOnRelease: see Lease.ResetOnRelease.
	ResetOnRelease bool
}

// Active reports whether the lease is in force at now.
func (l *Lease) Active(now time.Time) bool { return l != nil && now.Before(l.ExpiresAt) }

// CheckLeaseTTL turns a requested time-to-live in seconds (0 = default)
// into a duration, refusing one outside the bounds with invalid_argument.
func CheckLeaseTTL(seconds int) (time.Duration, error) {
	if seconds == 0 {
		return DefaultLeaseTTL, nil
	}
	ttl := time.Duration(seconds) * time.Second
	if ttl < MinLeaseTTL || ttl > MaxLeaseTTL {
		return 0, Errorf(CodeInvalidArgument, "ttlSeconds must be between %d and %d", int(MinLeaseTTL.Seconds()), int(MaxLeaseTTL.Seconds()))
	}
	return ttl, nil
}

// ActiveLease returns the lease in force at now, or nil.
func (d *Device) ActiveLease(now time.Time) *Lease {
	if d.Lease.Active(now) {
		return d.Lease
	}
	return nil
}

// AcquireLease grants holder exclusive use for ttl under the new lease id.
// A lease that has run out but was not yet recorded as expired is expired
// first, in the same append. A device leased by anyone (the holder too)
// answers device_unavailable with reason already_leased; renew instead.
func (d *Device) AcquireLease(now time.Time, holder Actor, leaseID string, ttl time.Duration) ([]Event, error) {
	return d.AcquireLeaseWith(now, holder, leaseID, ttl, LeaseOptions{})
}

// AcquireLeaseWith is AcquireLease with options. A device that owes a
// reset (or whose run-out lease will owe one once its expiry is recorded)
// answers device_unavailable with reason resetting (retryable): the next
// holder starts on the clean phone, never on the one being cleaned.
func (d *Device) AcquireLeaseWith(now time.Time, holder Actor, leaseID string, ttl time.Duration, o LeaseOptions) ([]Event, error) {
	if !d.Registered() {
		return nil, ErrDeviceNotFound(d.ID)
	}
	if l := d.ActiveLease(now); l != nil {
		return nil, Errorf(CodeDeviceUnavailable, "device %s is already leased until %s", d.ID, l.ExpiresAt.UTC().Format(time.RFC3339)).
			With("reason", ReasonAlreadyLeased).With("deviceId", d.ID).WithRetryable(true)
	}
	if err := d.checkNotResetting(); err != nil {
		return nil, err
	}
	var evs []Event
	if d.Lease != nil {
		evs = append(evs, LeaseExpired{DeviceID: d.ID, LeaseID: d.Lease.ID, ExpiredAt: d.Lease.ExpiresAt})
	}
	evs = append(evs, LeaseAcquired{DeviceID: d.ID, LeaseID: leaseID, FencingToken: d.FencingCounter + 1,
		Holder: holder, AcquiredAt: now, ExpiresAt: now.Add(ttl), ResetOnRelease: o.ResetOnRelease})
	return evs, nil
}

// checkNotResetting refuses a new lease while a reset is owed: recorded
// (ResetDue) or about to be (a lease with resetOnRelease that ran out and
// whose expiry is not recorded yet).
func (d *Device) checkNotResetting() error {
	if d.ResetDue != "" || d.Lease != nil && d.Lease.ResetOnRelease {
		return Errorf(CodeDeviceUnavailable, "device %s is being reset to its baseline; retry shortly", d.ID).
			With("reason", ReasonResetting).With("deviceId", d.ID).WithRetryable(true).With("retryAfterMs", 1000)
	}
	return nil
}

// CheckLease returns the device's lease if leaseID names the lease in force
// and actor holds it: lease_required when leaseID is empty, lease_mismatch
// otherwise (with reason expired, not_current or not_holder).
func (d *Device) CheckLease(now time.Time, actor Actor, leaseID string) (Lease, error) {
	if leaseID == "" {
		return Lease{}, Errorf(CodeLeaseRequired, "this call needs the device's current leaseId; acquire a lease first").
			With("deviceId", d.ID)
	}
	l := d.Lease
	switch {
	case l == nil || l.ID != leaseID:
		return Lease{}, Errorf(CodeLeaseMismatch, "lease %s is not the current lease of device %s", leaseID, d.ID).
			With("deviceId", d.ID).With("reason", "not_current")
	case !l.Active(now):
		return Lease{}, Errorf(CodeLeaseMismatch, "lease %s expired at %s", leaseID, l.ExpiresAt.UTC().Format(time.RFC3339)).
			With("deviceId", d.ID).With("reason", "expired")
	case l.Holder != actor:
		return Lease{}, Errorf(CodeLeaseMismatch, "lease %s is held by another actor", leaseID).
			With("deviceId", d.ID).With("reason", "not_holder")
	}
	return *l, nil
}

// RenewLease extends the holder's lease to now+ttl.
func (d *Device) RenewLease(now time.Time, holder Actor, leaseID string, ttl time.Duration) ([]Event, error) {
	if _, err := d.CheckLease(now, holder, leaseID); err != nil {
		return nil, err
	}
	return []Event{LeaseRenewed{DeviceID: d.ID, LeaseID: leaseID, RenewedAt: now, ExpiresAt: now.Add(ttl)}}, nil
}

// ReleaseLease ends the holder's lease now.
func (d *Device) ReleaseLease(now time.Time, holder Actor, leaseID string) ([]Event, error) {
	if _, err := d.CheckLease(now, holder, leaseID); err != nil {
		return nil, err
	}
	return []Event{LeaseReleased{DeviceID: d.ID, LeaseID: leaseID, ReleasedAt: now, Reset: d.Lease.ResetOnRelease}}, nil
}

// ExpireLease records the expiry of a lease that has run out by now; it
// returns no events when there is none.
func (d *Device) ExpireLease(now time.Time) []Event {
	if d.Lease == nil || d.Lease.Active(now) {
		return nil
	}
	return []Event{LeaseExpired{DeviceID: d.ID, LeaseID: d.Lease.ID, ExpiredAt: d.Lease.ExpiresAt, Reset: d.Lease.ResetOnRelease}}
}

// HandLease gives the device to holder `to` under the new lease leaseID
// for ttl: taken over from `from` when `from` holds the lease in force
// (released in the same append, so nobody can take the device in
// between), or acquired like AcquireLease when the device is free. A
// device leased by anyone else answers device_unavailable
// (already_leased). A hand-over is not the end of the device's use: a
// lease with resetOnRelease passes the option on to the new lease, so
// the reset happens when the device is finally given back.
func (d *Device) HandLease(now time.Time, from, to Actor, leaseID string, ttl time.Duration) ([]Event, error) {
	if l := d.ActiveLease(now); l != nil && l.Holder == from {
		return []Event{
			LeaseReleased{DeviceID: d.ID, LeaseID: l.ID, ReleasedAt: now},
			LeaseAcquired{DeviceID: d.ID, LeaseID: leaseID, FencingToken: d.FencingCounter + 1,
				Holder: to, AcquiredAt: now, ExpiresAt: now.Add(ttl), ResetOnRelease: l.ResetOnRelease},
		}, nil
	}
	return d.AcquireLease(now, to, leaseID, ttl)
}

// GiveUpLease ends the lease leaseID if it is still the device's: released
// when in force, recorded as expired when it ran out. Another lease (or
// none) is left alone.
func (d *Device) GiveUpLease(now time.Time, leaseID string) []Event {
	if leaseID == "" || d.Lease == nil || d.Lease.ID != leaseID {
		return nil
	}
	if !d.Lease.Active(now) {
		return []Event{LeaseExpired{DeviceID: d.ID, LeaseID: leaseID, ExpiredAt: d.Lease.ExpiresAt, Reset: d.Lease.ResetOnRelease}}
	}
	return []Event{LeaseReleased{DeviceID: d.ID, LeaseID: leaseID, ReleasedAt: now, Reset: d.Lease.ResetOnRelease}}
}

// ResetDone returns the events recording that the device was returned to
// its baseline for the reset it owes (device.reset; device.woken too when
// it was asleep, since a fresh phone's screen is on), or none when it owes
// none: a reset is recorded once.
func (d *Device) ResetDone(now time.Time) []Event {
	if d.ResetDue == "" {
		return nil
	}
	evs := []Event{DeviceReset{DeviceID: d.ID, LeaseID: d.ResetDue, At: now}}
	if d.Asleep {
		evs = append(evs, DeviceWoken{DeviceID: d.ID, At: now})
	}
	return evs
}
