package copilot

import (
	"context"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/projections"
)

// GetAllowance reads the caller's organisation's copilot allowance this
// billing period (GET /v1/copilot/allowance, hosted only; spec 2.4, 4.2).
type GetAllowance struct {
	Auth domain.Auth
}

// GetAllowanceHandler handles GetAllowance.
type GetAllowanceHandler struct{ c *Copilot }

// allowanceWaitLimit bounds how long a read waits for the read models.
const allowanceWaitLimit = 10 * time.Second

// Handle answers the allowance. Any signed-in person of the organisation,
// of either role, may read it (an API key cannot reach the copilot's
// routes; an OAuth app is refused at the edge). On a deployment that does
// not meter the copilot (local mode) it answers metered false. Refusals:
// permission_denied; checkout_unavailable (no allowance configured:
// answering 0 would show every customer exhausted); admission_unavailable
// (retryable) when the provisioning store cannot be read.
func (h GetAllowanceHandler) Handle(ctx context.Context, q GetAllowance) (domain.CopilotAllowance, error) {
	if err := access(q.Auth); err != nil {
		return domain.CopilotAllowance{}, err
	}
	return h.c.allowance(ctx, q.Auth.OrgID, 0)
}

// allowance is orgID's allowance now: included from the price list and the
// live subscription purchases (the fulfilments read model), used from the
// tokens the copilot read model recorded this period up to now, plus
// owing (tokens a running turn took and has not recorded yet).
func (c *Copilot) allowance(ctx context.Context, orgID string, owing int64) (domain.CopilotAllowance, error) {
	now := c.now()
	period := domain.BillingPeriodOf(now)
	if !c.cfg.Metered {
		return domain.UnmeteredCopilotAllowance(period), nil
	}
	if c.cfg.TokensPerDevice == nil {
		return domain.CopilotAllowance{}, domain.Errorf(domain.CodeCheckoutUnavailable,
			"this deployment has no copilot allowance configured (copilotTokensPerDevice in the price list)").WithRetryable(false)
	}
	wctx, cancel := context.WithTimeout(ctx, allowanceWaitLimit)
	defer cancel()
	if err := cqrs.AwaitAll(wctx, c.cfg.Store, c.cfg.ReadModels, projections.CopilotName, projections.FulfilmentsName); err != nil {
		if ctx.Err() != nil {
			return domain.CopilotAllowance{}, ctx.Err()
		}
		return domain.CopilotAllowance{}, domain.Errorf(domain.CodeInternal, "the copilot's token count is not up to date yet; retry shortly").
			WithRetryable(true).Wrap(err)
	}
	devices, err := projections.LiveFulfilments(ctx, c.cfg.Queries.DB, orgID, domain.BillingSubscription)
	if err != nil {
		return domain.CopilotAllowance{}, domain.Errorf(domain.CodeAdmissionUnavailable, "the provisioning store cannot be read now").
			WithRetryable(true).Wrap(err)
	}
	in, out, err := projections.Tokens(ctx, c.cfg.Queries.DB, orgID, nil, "", period.Start, now.Add(time.Microsecond))
	if err != nil {
		return domain.CopilotAllowance{}, err
	}
	return domain.MeteredCopilotAllowance(*c.cfg.TokensPerDevice, devices, in+out+owing, period), nil
}
