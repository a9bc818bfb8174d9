package schedules

import (
	"context"
	"encoding/json"

	"phonefleet/domain"
	"phonefleet/projections"
)

// UpdateSchedule changes a schedule (PATCH /v1/schedules/{scheduleId}):
// each field given replaces the schedule's, the others stay. Changing the
// cron expression or timezone, or switching the schedule on, counts its
// occurrences afresh from now: nothing missed before is caught up.
type UpdateSchedule struct {
	Auth       domain.Auth
	ScheduleID string

	Name     *string
	Cron     *string
	Timezone *string
	Enabled  *bool
	Goal     *string
	// DeviceID, when given, is the device; "" means any free device.
	DeviceID        *string
	Executor        *string
	MaxSteps        *int
	DeadlineSeconds *int
	// SuccessCheck, when SetSuccessCheck, replaces the check (nil removes
	// it).
	SuccessCheck    *domain.SuccessCheck
	SetSuccessCheck bool
	// Script, when SetScript, replaces the script (empty removes it).
	Script    json.RawMessage
	SetScript bool
}

// apply returns set with cmd's changes.
func (cmd UpdateSchedule) apply(set domain.ScheduleSettings) domain.ScheduleSettings {
	pick := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	pick(&set.Name, cmd.Name)
	pick(&set.Cron, cmd.Cron)
	pick(&set.Timezone, cmd.Timezone)
	pick(&set.Goal, cmd.Goal)
	pick(&set.DeviceID, cmd.DeviceID)
	pick(&set.Executor, cmd.Executor)
	if cmd.Enabled != nil {
		set.Enabled = *cmd.Enabled
	}
	if cmd.MaxSteps != nil {
		set.MaxSteps = *cmd.MaxSteps
	}
	if cmd.DeadlineSeconds != nil {
		set.DeadlineSeconds = *cmd.DeadlineSeconds
	}
	if cmd.SetSuccessCheck {
		set.SuccessCheck = cmd.SuccessCheck
	}
	if cmd.SetScript {
		set.Script = cmd.Script
		if len(set.Script) == 0 {
			set.Script = nil
		}
	}
	return set
}

// UpdateScheduleHandler handles UpdateSchedule.
type UpdateScheduleHandler struct {
	*Schedules
}

// Handle needs runs:start and devices:act; answers not_found for a
// schedule that is not the caller's (exactly as for a missing one) and
// invalid_argument for invalid settings. Changing nothing records nothing.
func (h UpdateScheduleHandler) Handle(ctx context.Context, cmd UpdateSchedule) (projections.ScheduleView, error) {
	if err := cmd.Auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return projections.ScheduleView{}, err
	}
	if cmd.DeviceID != nil {
		if err := h.checkDevice(ctx, cmd.Auth, *cmd.DeviceID); err != nil {
			return projections.ScheduleView{}, err
		}
	}
	now := h.now()
	if _, err := h.decide(ctx, cmd.ScheduleID, func(s *domain.Schedule) ([]domain.Event, error) {
		return s.Update(cmd.Auth, cmd.apply(s.ScheduleSettings), now)
	}); err != nil {
		return projections.ScheduleView{}, err
	}
	return h.view(ctx, cmd.Auth, cmd.ScheduleID)
}
