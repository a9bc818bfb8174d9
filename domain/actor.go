package domain

import "fmt"

// Actor kinds recorded on leases, actions and receipts.
const (
	ActorUser   = "user"
	ActorAPIKey = "api_key"
)

// Actor is who did something: a person (by subject id) or an API key (by
// key id). It is recorded on events as {"kind","id"}; receipts render it as
// ReceiptActor, which names exactly one of userId and apiKeyId.
type Actor struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// ActorOf returns the actor an authorization context acts as.
func ActorOf(a Auth) Actor {
	kind, id := a.Actor()
	return Actor{Kind: kind, ID: id}
}

// HolderOf returns the actor a credential holds leases as: the run for a
// run's credential, its actor otherwise.
func HolderOf(a Auth) Actor {
	if a.RunID != "" {
		return Actor{Kind: ActorRun, ID: a.RunID}
	}
	return ActorOf(a)
}

// String formats the actor as kind:id.
func (a Actor) String() string { return fmt.Sprintf("%s:%s", a.Kind, a.ID) }

// ReceiptActor is an actor as a receipt shows it: userId for a person,
// apiKeyId for a key, never both. A lease held by a run shows runId (a
// receipt never does: a run's actions are its starter's).
type ReceiptActor struct {
	UserID   string `json:"userId,omitempty"`
	APIKeyID string `json:"apiKeyId,omitempty"`
	RunID    string `json:"runId,omitempty"`
}

// ForReceipt returns the receipt form of a.
func (a Actor) ForReceipt() ReceiptActor {
	switch a.Kind {
	case ActorAPIKey:
		return ReceiptActor{APIKeyID: a.ID}
	case ActorRun:
		return ReceiptActor{RunID: a.ID}
	}
	return ReceiptActor{UserID: a.ID}
}
