package service

import (
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// Fulfilment routes: organisation A's phone is bought as the payment
// webhook records it (an open checkout on A's billing account, then the
// provider's checkout.session.completed applied), so A has a provisioned
// fulfilment; organisation B calls every /v1/fulfilments/{id} route with
// its id. B's cancel, return and cancel-renewal must be refused as for a
// fulfilment that never existed, which also means they change nothing.
func init() {
	fulfilment := func(c *tenancyClient) (map[string]string, map[string]string) {
		order, ful := openTestOrder(c.t, c.app, c.org, domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingSubscription})
		r, err := c.app.capabilities.Provisioning.ApplyProviderEvent(testutil.Context(c.t), paidSessionEvent(c.t, c.org, order))
		if err != nil || r.Outcome != provisioning.ProviderEventApplied {
			c.t.Fatalf("pay organisation A's order: %+v, %v", r, err)
		}
		return map[string]string{"id": ful}, nil
	}
	for _, p := range []string{"/v1/fulfilments/{id}/estimate-history", "/v1/fulfilments/{id}/renewal-status",
		"/v1/fulfilments/{id}/cancel", "/v1/fulfilments/{id}/return", "/v1/fulfilments/{id}/cancel-renewal"} {
		tenancyFixtures[p] = fulfilment
	}
}
