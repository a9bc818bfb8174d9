package console

import (
	"context"
	"time"

	"phonefleet/domain"
	"phonefleet/projections"
)

// GetProjectionStatus reads the state of every projection the service
// runs: its live version, state and lag, and the progress of a rebuild
// under way (GET /v1/operators/projections, the console's operators page).
type GetProjectionStatus struct {
	Auth domain.Auth
}

// ProjectionStatus is the answer of GetProjectionStatus: one entry per
// projection, in the runner's order.
type ProjectionStatus struct {
	Projections []ProjectionState
}

// ProjectionState is one projection as an operator sees it.
type ProjectionState struct {
	// Name is the projection's stable name.
	Name string
	// Version is the live version, the one answering reads (0 while the
	// projection is not yet created).
	Version int
	// State is live, rebuilding, failing or new (projections.Status).
	State string
	// Lag is how many events the live version trails the head of the feed by.
	Lag int64
	// OK is false while the projection is failing (as /healthz says).
	OK bool
	// UpdatedAt is when the live version last committed a batch (zero when
	// it never has).
	UpdatedAt time.Time
	// LastError is why the last batch failed. It is told to the local
	// operator only: the text comes from the database and may name any
	// organisation's rows, so a hosted organisation's admin gets "" (the
	// state still says failing).
	LastError string
	// Rebuild is the version being built beside the live one; nil when
	// none is.
	Rebuild *ProjectionRebuild
}

// ProjectionRebuild is the progress of a rebuild: a new version consuming
// the feed from its start beside the live one, taking over once caught up.
type ProjectionRebuild struct {
	Version   int
	StartedAt time.Time
	// Lag is how many events the new version still has to read.
	Lag int64
	// Progress is the share of the feed the new version has read, from 0
	// to 1.
	Progress float64
}

// ProjectionStatusReader reads every projection's state; the projection
// runner is one (projections.Runner.Status reads the database, so it
// answers for every instance).
type ProjectionStatusReader interface {
	Status(ctx context.Context) ([]projections.Status, error)
}

// GetProjectionStatusHandler answers GetProjectionStatus.
type GetProjectionStatusHandler struct {
	Projections ProjectionStatusReader
}

// Handle admits an organisation admin's signed-in session and local
// mode's operator; an OAuth app, an API key (whatever its scopes) and a
// member are refused with permission_denied. The projections are the
// service's, not one organisation's: what the answer shows of them is
// what /healthz publishes to anyone (name, version, state, lag), when
// each last advanced, and a rebuild's progress as a share of the feed;
// never an event count or a feed position, and the last error to the
// local operator only (ProjectionState.LastError).
func (h GetProjectionStatusHandler) Handle(ctx context.Context, q GetProjectionStatus) (ProjectionStatus, error) {
	a := q.Auth
	if err := a.DenyApp("operator views", "the console"); err != nil {
		return ProjectionStatus{}, err
	}
	if err := a.RequireSession("operator views"); err != nil {
		return ProjectionStatus{}, err
	}
	if a.Role != domain.RoleAdmin {
		return ProjectionStatus{}, domain.Errorf(domain.CodePermissionDenied, "operator views need an organisation admin").
			With("role", a.Role)
	}
	st, err := h.Projections.Status(ctx)
	if err != nil {
		return ProjectionStatus{}, err
	}
	out := ProjectionStatus{Projections: make([]ProjectionState, 0, len(st))}
	for _, s := range st {
		p := ProjectionState{Name: s.Name, Version: s.ActiveVersion, State: s.State, Lag: s.Lag,
			OK: s.State != "failing", UpdatedAt: s.UpdatedAt}
		if a.Kind == domain.PrincipalLocalOperator {
			p.LastError = s.LastError
		}
		if b := s.Building; b != nil {
			p.Rebuild = &ProjectionRebuild{Version: b.Version, StartedAt: b.StartedAt, Lag: b.Lag,
				Progress: progress(b.Position, b.Lag)}
		}
		out.Projections = append(out.Projections, p)
	}
	return out, nil
}

// progress is the share of the feed read by a consumer at position with
// lag events still to read: position over the head (position + lag). An
// empty feed is all read.
func progress(position, lag int64) float64 {
	head := position + lag
	if head <= 0 {
		return 1
	}
	return min(1, max(0, float64(position)/float64(head)))
}
