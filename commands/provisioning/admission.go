package provisioning

import (
	"context"
	"time"

	"phonefleet/domain"
)

// GetAdmission reads the organisation's onboarding and purchase status
// (GET /v1/admission).
type GetAdmission struct {
	Auth domain.Auth
	// CheckoutServed reports whether the surface asking serves
	// POST /v1/checkout-sessions (a hosted deployment does, a local one
	// does not).
	CheckoutServed bool
}

// Why a checkout cannot be started now (Admission.CheckoutBlocked), in the
// order the checkout checks them.
const (
	// AdmissionCheckoutNotServed: the deployment does not sell (local).
	AdmissionCheckoutNotServed = "checkout_not_served"
	// AdmissionInstanceNotServed: the organisation's sign-in instance is
	// not one whose purchases this deployment handles.
	AdmissionInstanceNotServed = "instance_not_served"
	// AdmissionProvisioned: a subscription phone is live; more are added
	// in the billing portal.
	AdmissionProvisioned = "provisioned"
	// AdmissionNoPaymentProvider: no payment provider is configured.
	AdmissionNoPaymentProvider = "no_payment_provider"
	// AdmissionPaymentInProgress: a paid checkout is being confirmed.
	AdmissionPaymentInProgress = "payment_in_progress"
)

// Admission is an organisation's onboarding and purchase status.
type Admission struct {
	// Provisioned reports whether a phone of a subscription is live
	// (provisioned or awaiting provisioning): a new subscription checkout
	// answers 409 wrong_state.
	Provisioned bool
	// PaygAccess reports whether the organisation may take pay-as-you-go
	// devices from the shared pool.
	PaygAccess bool
	// OpenCheckout is the attempt whose page is payable now, if any.
	OpenCheckout *OpenCheckout
	// Fulfilments counts the organisation's phones by state.
	Fulfilments FulfilmentCounts
	// CheckoutAvailable reports whether a checkout may be started now;
	// CheckoutBlocked says why not (one of the Admission… reasons).
	CheckoutAvailable bool
	CheckoutBlocked   string
}

// OpenCheckout is a payable checkout attempt.
type OpenCheckout struct {
	OrderID   string
	ExpiresAt time.Time
}

// FulfilmentCounts counts phones bought, by fulfilment state.
type FulfilmentCounts struct {
	Provisioned, AwaitingProvisioning, Cancelled int
}

// GetAdmissionHandler handles GetAdmission.
type GetAdmissionHandler struct{ *Provisioning }

// Handle answers GetAdmission for any credential of the organisation
// but an OAuth app (spec 5.2: onboarding status is the console's). It
// reads the billing account and its fulfilments from their streams (the
// fulfilments in one read), the same state checkout decides on, so the two
// never disagree; when they
// cannot be read, 503 admission_unavailable (retryable, with
// Retry-After).
func (p GetAdmissionHandler) Handle(ctx context.Context, q GetAdmission) (Admission, error) {
	if err := q.Auth.DenyApp("onboarding status", "the console"); err != nil {
		return Admission{}, err
	}
	unreadable := func(err error) error {
		return domain.Errorf(domain.CodeAdmissionUnavailable, "the provisioning store cannot be read now").WithRetryable(true).Wrap(err)
	}
	acct, _, err := p.accounts.Load(ctx, q.Auth.OrgID)
	if err != nil {
		return Admission{}, unreadable(err)
	}
	now := p.now()
	out := Admission{PaygAccess: acct.PaygActive()}
	var bought []string
	for _, o := range acct.Orders {
		if o.State == domain.OrderPaidState || o.State == domain.OrderEndedState {
			bought = append(bought, o.FulfilmentIDs...)
		}
	}
	// Every phone in one read of their streams (the write side, so a
	// payment just recorded counts, as checkout's own check sees it).
	phones, _, err := p.fulfilments.LoadMany(ctx, bought)
	if err != nil {
		return Admission{}, unreadable(err)
	}
	states := map[string]string{}
	pending := false
	for _, o := range acct.Orders {
		switch o.State {
		case domain.OrderOpen:
			if now.Before(o.ExpiresAt) {
				out.OpenCheckout = &OpenCheckout{OrderID: o.OrderID, ExpiresAt: o.ExpiresAt}
			}
		case domain.OrderPendingState:
			pending = true
		case domain.OrderPaidState, domain.OrderEndedState:
			for _, id := range o.FulfilmentIDs {
				f := phones[id]
				if !f.Exists() || f.OrgID != acct.OrgID {
					continue
				}
				states[id] = f.State
				switch f.State {
				case domain.FulfilmentProvisionedState:
					out.Fulfilments.Provisioned++
				case domain.FulfilmentAwaitingState:
					out.Fulfilments.AwaitingProvisioning++
				case domain.FulfilmentCancelledState:
					out.Fulfilments.Cancelled++
				}
			}
		}
	}
	out.Provisioned = acct.Provisioned(states)
	switch {
	case !q.CheckoutServed:
		out.CheckoutBlocked = AdmissionCheckoutNotServed
	case p.served(q.Auth) != nil:
		out.CheckoutBlocked = AdmissionInstanceNotServed
	case out.Provisioned:
		out.CheckoutBlocked = AdmissionProvisioned
	case p.cfg.Payments == nil:
		out.CheckoutBlocked = AdmissionNoPaymentProvider
	case p.attributed(q.Auth) != nil:
		// No sign-in instance to attribute the organisation to: no
		// instance's purchases are served for it.
		out.CheckoutBlocked = AdmissionInstanceNotServed
	case pending:
		out.CheckoutBlocked = AdmissionPaymentInProgress
	}
	out.CheckoutAvailable = out.CheckoutBlocked == ""
	return out, nil
}
