package schedules

import (
	"context"
	"phonefleet/commands/cqrs"

	"phonefleet/domain"
)

// DeleteSchedule removes a schedule (DELETE /v1/schedules/{scheduleId}):
// it fires no more. Runs it started go on.
type DeleteSchedule struct {
	Auth       domain.Auth
	ScheduleID string
}

// DeleteScheduleHandler handles DeleteSchedule.
type DeleteScheduleHandler struct {
	*Schedules
}

// Handle needs runs:start and devices:act; answers not_found for a
// schedule that is not the caller's, exactly as for a missing one.
func (h DeleteScheduleHandler) Handle(ctx context.Context, cmd DeleteSchedule) (cqrs.Done, error) {
	return cqrs.Done{}, h.handle(ctx, cmd)
}

func (h DeleteScheduleHandler) handle(ctx context.Context, cmd DeleteSchedule) error {
	if err := cmd.Auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return err
	}
	now := h.now()
	_, err := h.decide(ctx, cmd.ScheduleID, func(s *domain.Schedule) ([]domain.Event, error) {
		return s.Delete(cmd.Auth, now)
	})
	return err
}
