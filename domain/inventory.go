package domain

import (
	"slices"
	"time"
)

// A slot's inventory (issue 26): which fulfilments hold one of the units
// of a slot (PurchaseChoice.Slot), decided on one stream per slot,
// InventoryStream. Every unit handed to a paid phone is claimed there in
// the unit that provisions the phone, and released in the unit that
// retires its device, each at the version the decision saw: two instances
// handing out the last unit at once conflict, and the loser decides again
// on what won. How many units are free is never read from a read model.

// inventoryEvents are the events of the slots' inventories.
var inventoryEvents = []EventDef{
	Def[InventoryOpened](1, nil),
	Def[InventoryUnitClaimed](1, nil),
	Def[InventoryUnitReleased](1, nil),
}

// InventoryStream names the inventory stream of a slot.
func InventoryStream(slot string) string { return "inventory-" + slot }

// InventoryOpened starts a slot's stream: the fulfilments already holding
// a unit when it was opened (provisioned before units were claimed on
// the stream), so they keep counting.
type InventoryOpened struct {
	Slot string    `json:"slot"`
	Held []string  `json:"held"`
	At   time.Time `json:"at"`
}

// EventName implements Event.
func (InventoryOpened) EventName() string { return "inventory.opened" }

// InventoryUnitClaimed records a unit of the slot handed to a fulfilment.
type InventoryUnitClaimed struct {
	Slot         string    `json:"slot"`
	FulfilmentID string    `json:"fulfilmentId"`
	OrgID        string    `json:"orgId"`
	DeviceID     string    `json:"deviceId"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (InventoryUnitClaimed) EventName() string { return "inventory.unit_claimed" }

// InventoryUnitReleased records a fulfilment's unit back in the slot (its
// device retired when the fulfilment ended).
type InventoryUnitReleased struct {
	Slot         string    `json:"slot"`
	FulfilmentID string    `json:"fulfilmentId"`
	OrgID        string    `json:"orgId"`
	Reason       string    `json:"reason"`
	At           time.Time `json:"at"`
}

// EventName implements Event.
func (InventoryUnitReleased) EventName() string { return "inventory.unit_released" }

// Inventory is the aggregate of a slot's stream: the fulfilments holding
// its units. Apply is the only place its state changes.
type Inventory struct {
	Slot string
	// Opened reports that the stream exists.
	Opened bool
	Held   map[string]bool
	// OrgID is the organisation the last event concerned.
	OrgID   string
	Version int64
}

// Apply changes state by one recorded event at stream version version.
func (i *Inventory) Apply(e Event, version int64) {
	i.Version = version
	if i.Held == nil {
		i.Held = map[string]bool{}
	}
	switch e := e.(type) {
	case InventoryOpened:
		i.Slot, i.Opened = e.Slot, true
		for _, id := range e.Held {
			i.Held[id] = true
		}
	case InventoryUnitClaimed:
		i.OrgID = e.OrgID
		i.Held[e.FulfilmentID] = true
	case InventoryUnitReleased:
		i.OrgID = e.OrgID
		delete(i.Held, e.FulfilmentID)
	}
}

// InventoryClaim asks for a unit of a slot for one fulfilment.
type InventoryClaim struct {
	FulfilmentID, OrgID, DeviceID string
}

// Claim returns the events handing a unit to each of claims, in order,
// while units are free: capacity less the units held less reserved (the
// phones ahead in the slot's queue, which a unit freed goes to first).
// held lists, when the stream does not exist yet, the fulfilments that
// already hold a unit (InventoryOpened). It also answers which claims got
// a unit; a fulfilment that holds one already gets it again, with no event.
func (i *Inventory) Claim(slot string, capacity, reserved int, held []string, claims []InventoryClaim, now time.Time) ([]Event, []bool) {
	var evs []Event
	holders := map[string]bool{}
	for id := range i.Held {
		holders[id] = true
	}
	if !i.Opened {
		evs = append(evs, InventoryOpened{Slot: slot, Held: slices.Clone(held), At: now})
		for _, id := range held {
			holders[id] = true
		}
	}
	got := make([]bool, len(claims))
	for n, c := range claims {
		switch {
		case holders[c.FulfilmentID]:
			got[n] = true
		case capacity-len(holders)-reserved > 0:
			holders[c.FulfilmentID], got[n] = true, true
			evs = append(evs, InventoryUnitClaimed{Slot: slot, FulfilmentID: c.FulfilmentID, OrgID: c.OrgID, DeviceID: c.DeviceID, At: now})
		}
	}
	if !slices.Contains(got, true) || len(evs) == 0 {
		return nil, got
	}
	return evs, got
}

// Release returns the events putting back the units the fulfilments hold
// (those holding none are skipped).
func (i *Inventory) Release(slot string, fulfilmentIDs []string, orgID, reason string, now time.Time) []Event {
	var evs []Event
	for _, id := range fulfilmentIDs {
		if i.Held[id] {
			evs = append(evs, InventoryUnitReleased{Slot: slot, FulfilmentID: id, OrgID: orgID, Reason: reason, At: now})
		}
	}
	return evs
}
