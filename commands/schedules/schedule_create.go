package schedules

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
)

// CreateSchedule makes a schedule (POST /v1/schedules): when its cron
// expression falls due, a run with these settings starts as its creator.
type CreateSchedule struct {
	Auth domain.Auth
	domain.ScheduleSettings
}

// CreateScheduleHandler handles CreateSchedule.
type CreateScheduleHandler struct {
	*Schedules
}

// Handle needs runs:start and devices:act (permission_denied); refuses
// invalid settings with invalid_argument naming the field (an invalid cron
// expression, a device the caller cannot see, …); records schedule.created
// with the creator's credential, whose authority each firing acts with.
func (h CreateScheduleHandler) Handle(ctx context.Context, cmd CreateSchedule) (projections.ScheduleView, error) {
	if err := cmd.Auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return projections.ScheduleView{}, err
	}
	if err := h.checkDevice(ctx, cmd.Auth, cmd.DeviceID); err != nil {
		return projections.ScheduleView{}, err
	}
	id := domain.NewID(domain.PrefixSchedule)
	now := h.now()
	if _, err := h.decide(ctx, id, func(s *domain.Schedule) ([]domain.Event, error) {
		return s.Create(cmd.Auth, id, cmd.ScheduleSettings, now)
	}); err != nil {
		return projections.ScheduleView{}, err
	}
	return h.view(ctx, cmd.Auth, id)
}
