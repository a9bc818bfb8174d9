package domain

// fleetEvents are the events of devices, leases, actions, frames and receipts.
var fleetEvents = []EventDef{}
