package domain

// webhookEvents are the events of webhook subscriptions, deliveries and attempts.
var webhookEvents = []EventDef{}
