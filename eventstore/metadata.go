package eventstore

import (
	"context"
	"errors"
	"fmt"
)

// Metadata travels with every event: who caused it and in answer to what.
// Each edge (a REST or MCP request, an operator command) and each worker
// puts one value on the context with WithMetadata before it runs a
// command; the command's events carry it unchanged, so every event of the
// audit feed answers the same four questions.
type Metadata struct {
	// ActorKind is "user", "api_key", "operator", "system" or "run".
	ActorKind string `json:"actorKind,omitempty"`
	// ActorID is the person's subject id, the key id, or a system name.
	ActorID string `json:"actorId,omitempty"`
	// RequestID names the request (or worker pass) that ran the command.
	RequestID string `json:"requestId,omitempty"`
	// CorrelationID is shared by everything that follows from one request:
	// the request's own events and the events workers record in reaction.
	CorrelationID string `json:"correlationId,omitempty"`
	// CausationID is the id of what caused the event directly: the request
	// id for a request's events, the event id a worker reacted to.
	CausationID string `json:"causationId,omitempty"`
}

// ErrNoMetadata is matched by the error of a write whose context carries no
// complete Metadata.
var ErrNoMetadata = errors.New("eventstore: no event metadata on the context")

// complete reports which field is missing, or "" when none is.
func (m Metadata) missing() string {
	switch {
	case m.ActorKind == "" || m.ActorID == "":
		return "actor"
	case m.RequestID == "":
		return "request id"
	case m.CorrelationID == "":
		return "correlation id"
	case m.CausationID == "":
		return "causation id"
	}
	return ""
}

type metadataKey struct{}

// WithMetadata returns ctx carrying m for the events of every command run
// with it. An empty CorrelationID or CausationID is taken from RequestID: a
// request is its own correlation and the cause of its events.
func WithMetadata(ctx context.Context, m Metadata) context.Context {
	if m.CorrelationID == "" {
		m.CorrelationID = m.RequestID
	}
	if m.CausationID == "" {
		m.CausationID = m.RequestID
	}
	return context.WithValue(ctx, metadataKey{}, m)
}

// CausedBy returns ctx whose metadata names causationID as the direct
// cause (an event a worker reacts to), keeping actor, request and
// correlation.
func CausedBy(ctx context.Context, causationID string) context.Context {
	m, _ := ctx.Value(metadataKey{}).(Metadata)
	m.CausationID = causationID
	return context.WithValue(ctx, metadataKey{}, m)
}

// WithActor returns ctx whose metadata names another actor (a system part
// acting inside a request, such as the identity capability recording an
// organisation's binding), keeping request, correlation and causation.
func WithActor(ctx context.Context, kind, id string) context.Context {
	m, _ := ctx.Value(metadataKey{}).(Metadata)
	m.ActorKind, m.ActorID = kind, id
	return context.WithValue(ctx, metadataKey{}, m)
}

// MetadataFrom returns the metadata on ctx. It fails with ErrNoMetadata
// unless actor, request, correlation and causation are all present.
func MetadataFrom(ctx context.Context) (Metadata, error) {
	m, _ := ctx.Value(metadataKey{}).(Metadata)
	if f := m.missing(); f != "" {
		return m, fmt.Errorf("%w: the %s is missing (the edge or worker running the command sets it)", ErrNoMetadata, f)
	}
	return m, nil
}
