package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The shared pay-as-you-go pool (spec 1 capability 1, 4.5 POST
// /v1/devices/take): the deployment lends out Catalog.Pool.Size units of
// Catalog.Pool.Sku, one at a time, to organisations with pay-as-you-go
// access (Account.PaygActive). Every take and every return is an event on
// the one pool stream (PoolStream), so how many units are out, and how
// many each organisation holds, are folded from events at one version:
// two concurrent takes cannot both get the last unit, nor both take an
// organisation past its limit.
//
// A unit is lent as a device registered for the organisation (its own
// device id, a fresh phone) with a lease for the caller, appended in the
// same unit as pool.device_taken. It stays the organisation's while a
// lease is in force on it; once none is (released, expired), or the
// organisation loses pay-as-you-go access, it is retired from the
// organisation and pool.device_returned puts the unit back.

// poolEvents are the events of the shared pool.
var poolEvents = []EventDef{
	Def[PoolDeviceTaken](1, nil),
	Def[PoolDeviceReturned](1, nil),
}

// PoolStreamID is the stream of the deployment's shared pool.
const PoolStreamID = "payg-pool"

// PoolStream names the pool's stream (there is one pool per deployment;
// id is ignored, so the stream can be folded by an eventstore.Repository).
func PoolStream(string) string { return PoolStreamID }

// PoolDeviceTaken records a unit of the pool lent to an organisation: the
// device registered for it and the lease handed to the caller, appended in
// the same unit.
type PoolDeviceTaken struct {
	DeviceID string `json:"deviceId"`
	OrgID    string `json:"orgId"`
	// Sku is the pool's sku when the unit was taken.
	Sku     string    `json:"sku"`
	LeaseID string    `json:"leaseId"`
	By      Actor     `json:"by"`
	At      time.Time `json:"at"`
	// IdempotencyKey is the SHA-256 of the take's Idempotency-Key header
	// (DigestKey), and RequestDigest what the take asked (TakeDigest);
	// both empty for a take without a key (added in place).
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	RequestDigest  string `json:"requestDigest,omitempty"`
}

// EventName implements Event.
func (PoolDeviceTaken) EventName() string { return "pool.device_taken" }

// Reasons a pool device went back to the pool.
const (
	// PoolReturnLeaseEnded: no lease was in force on the device any more
	// (released, or run out).
	PoolReturnLeaseEnded = "lease_ended"
	// PoolReturnAccessEnded: the organisation's pay-as-you-go access ended
	// while it held the device.
	PoolReturnAccessEnded = "access_ended"
)

// PoolDeviceReturned records that a lent unit is back in the pool: its
// device was retired from the organisation first.
type PoolDeviceReturned struct {
	DeviceID string    `json:"deviceId"`
	OrgID    string    `json:"orgId"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// EventName implements Event.
func (PoolDeviceReturned) EventName() string { return "pool.device_returned" }

// ReasonPoolExhausted is the device_unavailable reason of a take while
// every unit of the pool is lent out (retryable, with retryAfterMs).
const ReasonPoolExhausted = "pool_exhausted"

// MinPoolRetryAfter is the least retryAfterMs a refused take names: a unit
// whose lease has ended comes back at the return worker's next pass.
const MinPoolRetryAfter = time.Second

// PoolLoan is one unit of the pool out with an organisation.
type PoolLoan struct {
	DeviceID string
	OrgID    string
	Sku      string
	// LeaseID is the lease the take handed over.
	LeaseID string
	By      Actor
	TakenAt time.Time
}

// Pool is the aggregate of the shared pool's stream: the units out, by
// device id. Apply is the only place its state changes.
type Pool struct {
	Out map[string]PoolLoan
	// Keys are the takes made with an Idempotency-Key in the last
	// CheckoutKeyWindow (as of the newest take), by organisation and key
	// digest (poolKey): a repeat answers the take they name.
	Keys map[string]PoolKeyUse
	// OrgID is the organisation the last event concerned; the events of
	// one take or return concern one organisation, whose id they are
	// recorded under.
	OrgID string
	// Version is the stream version of the last applied event.
	Version int64
}

// PoolKeyUse is a take made with an Idempotency-Key.
type PoolKeyUse struct {
	DeviceID      string
	RequestDigest string
	At            time.Time
}

// poolKey is the key of Pool.Keys: a key is the organisation's own.
func poolKey(orgID, keyDigest string) string { return orgID + "/" + keyDigest }

// NewPool returns the state of an empty pool stream.
func NewPool() Pool { return Pool{Out: map[string]PoolLoan{}, Keys: map[string]PoolKeyUse{}} }

// Clone returns a copy of p that shares nothing with it.
func (p Pool) Clone() Pool {
	c := p
	c.Out = make(map[string]PoolLoan, len(p.Out))
	for k, v := range p.Out {
		c.Out[k] = v
	}
	c.Keys = make(map[string]PoolKeyUse, len(p.Keys))
	for k, v := range p.Keys {
		c.Keys[k] = v
	}
	return c
}

// Apply changes state by one recorded event at stream version version.
func (p *Pool) Apply(e Event, version int64) {
	p.Version = version
	if p.Out == nil {
		p.Out = map[string]PoolLoan{}
	}
	if p.Keys == nil {
		p.Keys = map[string]PoolKeyUse{}
	}
	switch e := e.(type) {
	case PoolDeviceTaken:
		p.OrgID = e.OrgID
		p.Out[e.DeviceID] = PoolLoan{DeviceID: e.DeviceID, OrgID: e.OrgID, Sku: e.Sku, LeaseID: e.LeaseID, By: e.By, TakenAt: e.At}
		// Keys older than the window are forgotten as of this take, so
		// the state does not grow with the stream.
		for k, use := range p.Keys {
			if e.At.Sub(use.At) >= CheckoutKeyWindow {
				delete(p.Keys, k)
			}
		}
		if e.IdempotencyKey != "" {
			p.Keys[poolKey(e.OrgID, e.IdempotencyKey)] = PoolKeyUse{DeviceID: e.DeviceID, RequestDigest: e.RequestDigest, At: e.At}
		}
	case PoolDeviceReturned:
		p.OrgID = e.OrgID
		delete(p.Out, e.DeviceID)
	}
}

// UseKey looks up the organisation's take made with an Idempotency-Key
// (its digest, DigestKey) within CheckoutKeyWindow of now, as checkout
// does (spec 4.1): found with the same request (TakeDigest), the repeat
// answers that take again (replay); found with another request, 409
// idempotency_conflict, not retryable. A take is one append, so no take
// is ever found still running.
func (p *Pool) UseKey(orgID, key, request string, now time.Time) (use PoolKeyUse, replay bool, err error) {
	if key == "" {
		return PoolKeyUse{}, false, nil
	}
	use, ok := p.Keys[poolKey(orgID, key)]
	if !ok || now.Sub(use.At) >= CheckoutKeyWindow {
		return PoolKeyUse{}, false, nil
	}
	if use.RequestDigest != request {
		return PoolKeyUse{}, false, Errorf(CodeIdempotencyConflict,
			"this Idempotency-Key was used for a different take in the last 24 hours; use a new key for a new take").WithRetryable(false)
	}
	return use, true, nil
}

// TakeDigest is what a take asks, compared between the takes sent with one
// Idempotency-Key: the lease's time-to-live once defaulted, so a repeat
// that spells the default out asks the same.
func TakeDigest(ttl time.Duration) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("take ttlSeconds=%d", int64(ttl/time.Second))))
	return hex.EncodeToString(h[:])
}

// Loans returns the units out, oldest first (device ids are time-ordered,
// so ties in TakenAt keep the order they were taken in).
func (p *Pool) Loans() []PoolLoan {
	out := make([]PoolLoan, 0, len(p.Out))
	for _, l := range p.Out {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b PoolLoan) int {
		if c := a.TakenAt.Compare(b.TakenAt); c != 0 {
			return c
		}
		return strings.Compare(a.DeviceID, b.DeviceID)
	})
	return out
}

// Holding returns the units orgID holds (taken, not yet returned), oldest
// first.
func (p *Pool) Holding(orgID string) []PoolLoan {
	return slices.DeleteFunc(p.Loans(), func(l PoolLoan) bool { return l.OrgID != orgID })
}

// PoolTake is one request for a unit of the pool.
type PoolTake struct {
	OrgID string
	By    Actor
	// Sku and Size are the pool's (Catalog.Pool); Limit is how many units
	// one organisation may hold at once (SERVICE_PAYG_DEVICE_LIMIT).
	Sku   string
	Size  int
	Limit int
	// DeviceID and LeaseID name the device to register and its lease.
	DeviceID string
	LeaseID  string
	Now      time.Time
	// IdempotencyKey and RequestDigest are recorded on the take (see
	// PoolDeviceTaken); empty without a key.
	IdempotencyKey, RequestDigest string
	// LeaseEnds returns when the lease in force on a lent device ends, or
	// the zero time when none is (its return is due); it is asked only to
	// name retryAfterMs on a refusal.
	LeaseEnds func(deviceID string) (time.Time, error)
}

// Take returns the event lending a unit to t.OrgID. It refuses with
// fleet_at_capacity (holding, limit, retryAfterMs; retryable) when the
// organisation already holds Limit units, and with device_unavailable
// (reason pool_exhausted, retryAfterMs; retryable) when every unit is out.
// retryAfterMs is the time until the earliest of the leases concerned
// ends, at least MinPoolRetryAfter.
func (p *Pool) Take(t PoolTake) ([]Event, error) {
	if held := p.Holding(t.OrgID); len(held) >= t.Limit {
		wait, err := poolRetryAfter(held, t.Now, t.LeaseEnds)
		if err != nil {
			return nil, err
		}
		return nil, Errorf(CodeFleetAtCapacity, "the organisation holds %d pay-as-you-go devices, its limit; release one first", len(held)).
			With("holding", len(held)).With("limit", t.Limit).With("retryAfterMs", wait).WithRetryable(true)
	}
	if len(p.Out) >= t.Size {
		// Which organisations hold the units is not said; only when the
		// first may come back.
		wait, err := poolRetryAfter(p.Loans(), t.Now, t.LeaseEnds)
		if err != nil {
			return nil, err
		}
		return nil, Errorf(CodeDeviceUnavailable, "every device of the shared pool is in use; retry after retryAfterMs").
			With("reason", ReasonPoolExhausted).With("retryAfterMs", wait).WithRetryable(true)
	}
	return []Event{PoolDeviceTaken{DeviceID: t.DeviceID, OrgID: t.OrgID, Sku: t.Sku, LeaseID: t.LeaseID, By: t.By, At: t.Now,
		IdempotencyKey: t.IdempotencyKey, RequestDigest: t.RequestDigest}}, nil
}

// poolRetryAfter is the milliseconds until the earliest lease on loans
// ends, rounded up, at least MinPoolRetryAfter (also when a loan has no
// lease in force: its return is due at the worker's next pass).
func poolRetryAfter(loans []PoolLoan, now time.Time, leaseEnds func(string) (time.Time, error)) (int64, error) {
	earliest := time.Duration(-1)
	for _, l := range loans {
		end, err := leaseEnds(l.DeviceID)
		if err != nil {
			return 0, err
		}
		left := end.Sub(now)
		if end.IsZero() || left < 0 {
			left = 0
		}
		if earliest < 0 || left < earliest {
			earliest = left
		}
	}
	earliest = max(earliest, MinPoolRetryAfter)
	return int64((earliest + time.Millisecond - 1) / time.Millisecond), nil
}

// PoolReturnDue says whether a lent unit goes back to the pool, and why:
// when no lease is in force on its device, or its organisation no longer
// has pay-as-you-go access.
func PoolReturnDue(leaseInForce, paygActive bool) (reason string, due bool) {
	switch {
	case !paygActive:
		return PoolReturnAccessEnded, true
	case !leaseInForce:
		return PoolReturnLeaseEnded, true
	}
	return "", false
}

// Return returns the event putting a lent unit back, or none when the unit
// is not out (returned already): a unit comes back once.
func (p *Pool) Return(deviceID, reason string, now time.Time) []Event {
	l, ok := p.Out[deviceID]
	if !ok {
		return nil
	}
	return []Event{PoolDeviceReturned{DeviceID: deviceID, OrgID: l.OrgID, Reason: reason, At: now}}
}

// PoolDeviceName is the display name of a device lent from the pool: the
// sku's name, marked as pay-as-you-go.
func PoolDeviceName(skuName string) string {
	name := strings.TrimSpace(skuName)
	if name == "" {
		name = "Pool device"
	}
	name += " (pay-as-you-go)"
	if utf8.RuneCountInString(name) > MaxDeviceNameRunes {
		name = string([]rune(name)[:MaxDeviceNameRunes])
	}
	return name
}
