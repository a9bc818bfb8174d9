package wire

import (
	"encoding/json"
	"time"

	"phonefleet/domain"
	"phonefleet/projections"
)

// The shapes of schedules and their firings (/v1/schedules). Times are
// written by domain.FormatWebhookTime, as schedule.triggered writes
// scheduledFor, so a firing row and the webhook about it agree.

// Schedule is a schedule as the API shows it.
type Schedule struct {
	ScheduleID      string               `json:"scheduleId"`
	Name            string               `json:"name"`
	Cron            string               `json:"cron"`
	Timezone        string               `json:"timezone"`
	Enabled         bool                 `json:"enabled"`
	Goal            string               `json:"goal"`
	DeviceID        *string              `json:"deviceId"`
	Executor        string               `json:"executor"`
	MaxSteps        int                  `json:"maxSteps"`
	DeadlineSeconds int                  `json:"deadlineSeconds"`
	SuccessCheck    *domain.SuccessCheck `json:"successCheck"`
	Script          json.RawMessage      `json:"script"`
	CreatedBy       domain.ReceiptActor  `json:"createdBy"`
	CreatedAt       string               `json:"createdAt"`
	UpdatedAt       string               `json:"updatedAt"`
	NextFireAt      *string              `json:"nextFireAt"`
	LastFiring      *ScheduleLastFiring  `json:"lastFiring"`
}

// ScheduleLastFiring summarises a schedule's latest firing.
type ScheduleLastFiring struct {
	ScheduledFor string  `json:"scheduledFor"`
	Outcome      string  `json:"outcome"`
	AgentRunID   *string `json:"agentRunId"`
}

// NewSchedule returns v as the API shows it: maxSteps and deadlineSeconds
// with their defaults filled in, so the caller sees what a run will get.
func NewSchedule(v projections.ScheduleView) Schedule {
	out := Schedule{ScheduleID: v.ScheduleID, Name: v.Name, Cron: v.Cron, Timezone: v.Timezone, Enabled: v.Enabled,
		Goal: v.Goal, DeviceID: scheduleOptional(v.DeviceID), Executor: v.Executor, MaxSteps: v.MaxSteps,
		DeadlineSeconds: v.DeadlineSeconds, SuccessCheck: v.SuccessCheck, Script: v.Script, CreatedBy: v.CreatedBy,
		CreatedAt: domain.FormatWebhookTime(v.CreatedAt), UpdatedAt: domain.FormatWebhookTime(v.UpdatedAt),
		NextFireAt: optionalTime(v.NextFireAt)}
	if out.MaxSteps == 0 {
		out.MaxSteps = domain.DefaultRunMaxSteps
	}
	if out.DeadlineSeconds == 0 {
		out.DeadlineSeconds = int(domain.DefaultRunDeadline / time.Second)
	}
	if len(out.Script) == 0 {
		out.Script = json.RawMessage("null")
	}
	if v.LastScheduledFor != nil {
		out.LastFiring = &ScheduleLastFiring{ScheduledFor: domain.FormatWebhookTime(*v.LastScheduledFor),
			Outcome: v.LastOutcome, AgentRunID: scheduleOptional(v.LastAgentRunID)}
	}
	return out
}

// SchedulePage is one page of schedules, oldest first.
type SchedulePage struct {
	Schedules []Schedule `json:"schedules"`
	// NextAfter, on every page but the last, is passed back as ?after=.
	NextAfter string `json:"nextAfter,omitempty"`
}

// NewSchedulePage returns p as the API lists it (never null).
func NewSchedulePage(p projections.SchedulePage) SchedulePage {
	return SchedulePage{Schedules: each(p.Schedules, NewSchedule), NextAfter: p.NextAfter}
}

// ScheduleFiring is one firing of a schedule: the occurrence it fired
// for and what it did.
type ScheduleFiring struct {
	FiringID     string  `json:"firingId"`
	ScheduleID   string  `json:"scheduleId"`
	ScheduledFor string  `json:"scheduledFor"`
	FiredAt      string  `json:"firedAt"`
	Skipped      bool    `json:"skippedEarlier"`
	Outcome      string  `json:"outcome"`
	AgentRunID   *string `json:"agentRunId"`
	RunID        *string `json:"runId"`
	DeviceID     *string `json:"deviceId"`
	Reason       *string `json:"reason"`
	Detail       *string `json:"detail"`
	CompletedAt  *string `json:"completedAt"`
}

// NewScheduleFiring returns f as the API shows it.
func NewScheduleFiring(f projections.FiringView) ScheduleFiring {
	return ScheduleFiring{FiringID: f.FiringID, ScheduleID: f.ScheduleID, ScheduledFor: domain.FormatWebhookTime(f.ScheduledFor),
		FiredAt: domain.FormatWebhookTime(f.FiredAt), Skipped: f.Skipped, Outcome: f.Outcome,
		AgentRunID: scheduleOptional(f.AgentRunID), RunID: scheduleOptional(f.RunID), DeviceID: scheduleOptional(f.DeviceID),
		Reason: scheduleOptional(f.Reason), Detail: scheduleOptional(f.Detail), CompletedAt: optionalTime(f.CompletedAt)}
}

// ScheduleFiringPage is one page of firings, newest first.
type ScheduleFiringPage struct {
	Firings []ScheduleFiring `json:"firings"`
	// NextBefore, on every page but the last, is passed back as ?before=.
	NextBefore *string `json:"nextBefore,omitempty"`
}

// NewScheduleFiringPage returns p as the API lists it (never null).
func NewScheduleFiringPage(p projections.FiringPage) ScheduleFiringPage {
	return ScheduleFiringPage{Firings: each(p.Firings, NewScheduleFiring), NextBefore: optionalTime(p.NextBefore)}
}

func scheduleOptional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
