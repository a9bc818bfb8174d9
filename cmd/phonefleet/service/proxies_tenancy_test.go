package service

import (
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// Managed proxy routes: organisation A's paid order, the proxy it issued
// and an operation on it are recorded on A's proxy stream as the payment
// webhook and the operation request record them; organisation B calls
// every /v1/proxies/{proxyId}, /v1/proxy-orders/{orderId} and
// /v1/proxy-operations/{operationId} route with A's ids. B's reveal and
// cancel must be refused as for ids that never existed, which also means
// they change nothing.
func init() {
	proxy := func(c *tenancyClient) (map[string]string, map[string]string) {
		order, proxyID, op := domain.NewID(domain.PrefixProxyOrder), domain.NewID(domain.PrefixProxy), domain.NewID(domain.PrefixProxyOp)
		now := time.Now().UTC().Truncate(time.Microsecond)
		product, _ := domain.DefaultCatalog().ProxyProduct("us-fixed")
		by := domain.Actor{Kind: domain.ActorUser, ID: "user_a"}
		news, err := eventstore.Encode[domain.Event](domain.Events, c.org,
			domain.ProxyOrderStarted{OrgID: c.org, OrderID: order, ProxyID: proxyID, Product: product, Currency: "usd", QuoteID: "qt_t",
				RequestDigest: "t", By: by, At: now},
			domain.ProxyOrderPaid{OrderID: order, SubscriptionID: "sub_" + order, ProviderEventID: "evt_" + order, At: now},
			domain.ProxyIssued{ProxyID: proxyID, OrderID: order, ProductID: product.ID, Kind: product.Kind, Country: product.Country,
				Protocol: product.Protocol, Host: "127.0.0.1", Port: 3128, Username: "px-" + proxyID[4:16], SealedPassword: []byte{1}, At: now},
			domain.ProxyOperationRequested{OperationID: op, ProxyID: proxyID, Kind: domain.ProxyOpRotate, Username: "px-r" + proxyID[4:15],
				SealedPassword: []byte{2}, RequestDigest: "t", By: by, At: now})
		if err != nil {
			c.t.Fatal(err)
		}
		appended, err := c.app.store.Append(testutil.Context(c.t), domain.ProxyStream(c.org), eventstore.AnyVersion, news...)
		if err != nil {
			c.t.Fatal(err)
		}
		if err := c.app.runner.WaitFor(testutil.Context(c.t), projections.ProxiesName, appended); err != nil {
			c.t.Fatal(err)
		}
		return map[string]string{"proxyId": proxyID, "orderId": order, "operationId": op}, nil
	}
	for _, p := range []string{"/v1/proxies/{proxyId}", "/v1/proxies/{proxyId}/credentials", "/v1/proxy-orders/{orderId}",
		"/v1/proxy-orders/{orderId}/cancel", "/v1/proxy-operations/{operationId}"} {
		tenancyFixtures[p] = proxy
	}
}
