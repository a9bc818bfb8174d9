package fleet

import (
	"context"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// MarkAbandonedActions settles the actions an earlier process left
// unfinished on one host: recorded as requested, with no outcome. The
// process that was executing one ended between the request and the
// outcome, so the action may or may not have happened. A host's takeover
// sends it when this process becomes the host (the sim host: the device
// runtime's takeover pass, devices.Settle; a gateway: the gateway tunnels'
// surface, http/gatewayhub), before it runs anything there. Actions of other hosts are left alone: another
// process may be running them.
type MarkAbandonedActions struct {
	// Host is the host taken over (domain.HostSim, or a gateway's key).
	Host string
}

// MarkAbandonedActionsHandler handles MarkAbandonedActions.
type MarkAbandonedActionsHandler struct{ f *Fleet }

// MarkAbandonedActions returns the handler of MarkAbandonedActions.
func (f *Fleet) MarkAbandonedActions() MarkAbandonedActionsHandler {
	return MarkAbandonedActionsHandler{f}
}

// Handle gives every such action of cmd.Host the outcome unknown (the action
// aggregate decides: one already finished, whose idempotency row lagged
// behind, keeps its outcome) and closes its idempotency row. Such an
// action is never executed again. It returns how many it marked; errors
// are the database's, and the actions not reached stay for the next
// takeover.
func (h MarkAbandonedActionsHandler) Handle(ctx context.Context, cmd MarkAbandonedActions) (int, error) {
	f := h.f
	rows, err := f.pool.Query(ctx, `SELECT org_id, idempotency_key, action_id FROM action_idempotency
		WHERE state = 'requested' AND host = $1`, cmd.Host)
	if err != nil {
		return 0, err
	}
	type open struct{ org, key, action string }
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (open, error) {
		var o open
		err := r.Scan(&o.org, &o.key, &o.action)
		return o, err
	})
	if err != nil {
		return 0, err
	}
	marked := 0
	for _, op := range list {
		_, c, err := f.actions.UpdateWith(eventstore.CausedBy(ctx, op.action), op.action, func(r *domain.ActionRecord, u *eventstore.Unit) ([]domain.Event, error) {
			state := "unknown"
			var evs []domain.Event
			if !r.Finished() {
				var err error
				if evs, err = r.MarkOutcomeUnknown("the service stopped before the outcome was recorded", f.now()); err != nil {
					return nil, err
				}
			} else if !r.OutcomeUnknown {
				state = r.State // the outcome is recorded; the row lagged behind
			}
			closeIdempotency(u, op.org, op.key, state, f.now())
			return evs, nil
		})
		if err != nil {
			return marked, err
		}
		if len(c.Appends) > 0 {
			marked++
		}
	}
	return marked, nil
}
