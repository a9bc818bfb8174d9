package provisioning

import (
	"context"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/projections"
)

// GetUsage reads an organisation's device time in one billing period
// (GET /v1/usage).
type GetUsage struct {
	Auth domain.Auth
	// Period names the billing period, YYYY-MM-DD, the first day of its
	// month; empty means the current one.
	Period string
	// DeviceID, when set, limits the report to one device. A device the
	// caller cannot see (another organisation's, outside the credential's
	// subset, or none at all) has no time to report: the answer is the
	// same empty report in every case.
	DeviceID string
}

// UsageReport is the answer of GetUsage.
type UsageReport = domain.UsageReport

// usageWaitLimit bounds how long a read waits for the read model.
const usageWaitLimit = 10 * time.Second

// GetUsageHandler handles GetUsage.
type GetUsageHandler struct{ *Provisioning }

// Handle returns the caller's organisation's device time in the
// period. Any signed-in person of the organisation (either role, or the
// local operator) may read it, and an API key with devices:read, which
// sees only its devices; an OAuth app may not. Errors: permission_denied,
// invalid_argument (period, with field), internal_error (retryable) when
// the read model does not catch up within usageWaitLimit.
func (p GetUsageHandler) Handle(ctx context.Context, q GetUsage) (UsageReport, error) {
	a := q.Auth
	if err := a.DenyApp("usage", "the console's usage page"); err != nil {
		return UsageReport{}, err
	}
	if !a.IsSession() {
		if err := a.Require(domain.ScopeDevicesRead); err != nil {
			return UsageReport{}, err
		}
	}
	var period *domain.BillingPeriod
	if q.Period != "" {
		p, err := domain.ParseBillingPeriod(q.Period)
		if err != nil {
			return UsageReport{}, err
		}
		period = &p
	}
	if err := p.usageCaughtUp(ctx); err != nil {
		return UsageReport{}, err
	}
	// Counted after the wait: open intervals count up to the answer.
	asOf := p.now()
	if period == nil {
		p := domain.BillingPeriodOf(asOf)
		period = &p
	}
	// The filter admits only the organisation's intervals on the
	// credential's devices, so a device the caller cannot see reports
	// nothing, exactly as one that never held a lease.
	intervals, err := projections.UsageIntervals(ctx, p.pool, projections.UsageFilter{OrgID: a.OrgID, Devices: a.Devices,
		DeviceID: q.DeviceID, From: period.Start, To: period.End})
	if err != nil {
		return UsageReport{}, err
	}
	report := domain.TallyUsage(*period, asOf, intervals)
	// The copilot's tokens in the same period, on the same devices, up to asOf.
	to := period.End
	if asOf.Before(to) {
		to = asOf.Add(time.Microsecond)
	}
	report.CopilotInputTokens, report.CopilotOutputTokens, err = projections.Tokens(ctx, p.pool, a.OrgID, a.Devices, q.DeviceID,
		period.Start, to)
	return report, err
}

// usageCaughtUp waits until the usage read model has applied every event
// committed so far, so a lease released just before the read is counted
// as released.
func (p *Provisioning) usageCaughtUp(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, usageWaitLimit)
	defer cancel()
	if err := cqrs.AwaitAll(wctx, p.store, p.cfg.ReadModels, projections.UsageName, projections.CopilotName); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return domain.Errorf(domain.CodeInternal, "device time is not up to date yet; retry shortly").WithRetryable(true).Wrap(err)
	}
	return nil
}
