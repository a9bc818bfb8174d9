package httpapi

import (
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/gorilla/mux"

	"phonefleet/domain"
)

// The app gate (spec 5.2): a third-party OAuth app's token may use only the
// routes the spec lists for apps; every other route answers 403
// permission_denied naming where to do it instead. The gate is default-deny
// and runs in authenticate, so a route added later is closed to apps until
// it is listed here or annotated with allowApps — forgetting fails closed.
//
// Finer restrictions inside an allowed route (an app sees only the webhooks
// it created; a pay-as-you-go purchase; the device-surface role) are the
// route's own checks, with domain.Auth.IsApp, Auth.ClientID and
// Auth.DenyApp.

// appRoutes are the routes of spec 5.2's list that this deployment serves,
// as "METHOD path" with each path parameter written {} (parameter names do
// not matter). TestAppRoutesExist keeps it to mounted routes, so a route
// renamed or not yet served cannot leave a stale opening.
var appRoutes = map[string]bool{}

func init() {
	for _, r := range []string{
		// 1. devices: list, read, screenshot, UI snapshot, who is driving,
		// take a pay-as-you-go device.
		"GET /v1/devices", "GET /v1/devices/{}", "GET /v1/devices/{}/screenshot", "GET /v1/devices/{}/snapshot",
		"GET /v1/devices/{}/driving", "POST /v1/devices/take",
		// 2. leases, actions, wake.
		"POST /v1/devices/{}/lease", "PATCH /v1/devices/{}/lease", "DELETE /v1/devices/{}/lease",
		"POST /v1/devices/{}/actions", "POST /v1/devices/{}/wake",
		// 3. the organisation's leases; one receipt by its idempotency key.
		"GET /v1/leases", "GET /v1/receipts/{}",
		// 4. runs (reading one includes its script and a replay's
		// divergence report) and their frames.
		"POST /v1/runs", "GET /v1/runs", "GET /v1/runs/{}", "POST /v1/runs/{}/pause", "POST /v1/runs/{}/resume",
		"POST /v1/runs/{}/cancel", "GET /v1/runs/{}/frames", "GET /v1/runs/{}/script", "GET /v1/runs/{}/divergence", "GET /v1/frames/{}",
		// 5. webhooks (the routes themselves limit an app to those it created).
		"POST /v1/webhooks", "GET /v1/webhooks", "GET /v1/webhooks/{}", "PATCH /v1/webhooks/{}",
		"DELETE /v1/webhooks/{}", "POST /v1/webhooks/{}/rotate", "POST /v1/webhooks/{}/test",
		"GET /v1/webhooks/{}/deliveries",
		// 6. the price list and a prepaid order (the route refuses
		// pay-as-you-go and a member's app).
		"GET /v1/skus", "POST /v1/checkout-sessions",
		// 7. the agent tool surface.
		"POST /mcp", "GET /mcp", "DELETE /mcp",
	} {
		appRoutes[r] = true
	}
}

// appDenials name, by path prefix, what an app was refused and where to do
// it instead (spec 5.2, "Everything else"). The longest matching prefix wins.
var appDenials = []struct{ prefix, what, where string }{
	{"/v1/api-keys", "API keys", "the console's API keys page"},
	{"/v1/fulfilments", "reading, cancelling or returning orders", "the console's orders page"},
	{"/v1/billing", "billing and the billing portal", "the console's billing page"},
	{"/v1/usage", "usage", "the console's usage page"},
	{"/v1/admission", "onboarding status", "the console"},
	{"/v1/notifications", "notifications", "the console"},
	{"/v1/me", "notification preferences", "the console"},
	{"/v1/receipts", "the receipt feed", "the console's receipts page (an app reads one receipt by its idempotency key)"},
	{"/v1/copilot", "the copilot", "the console"},
	{"/v1/cli-sessions", "CLI sign-in", "the console"},
	{"/v1/console", "the console's own telemetry", "the console"},
	{"/v1/members", "team management", "the console's team page"},
	{"/v1/gateways", "gateways", "the console (an organisation admin)"},
	{"/v1/app-store", "managing apps", "the console's Apps page"},
	{"/v1/app-library", "managing apps", "the console's Apps page"},
	{"/v1/proxies", "managed proxies", "the console's Proxies page"},
	{"/v1/proxy-", "managed proxies", "the console's Proxies page"},
	{"/v1/devices/{}/live-session", "live video sessions", "the console"},
	{"/v1/devices/{}/stream", "live video sessions", "the console"},
	{"/v1/devices/{}", "renaming or stopping a device", "the console's device page"},
}

// appAnnotated holds routes other areas opened to apps with allowApps.
var appAnnotated sync.Map // *mux.Route → struct{}

// allowApps opens route to OAuth apps beyond spec 5.2's list (for example a
// route the list names by meaning but whose path it does not show), and
// returns it for chaining:
//
//	s.allowApps(r.Handle("/devices/{deviceId}/elements", h).Methods(http.MethodGet))
func (s *Server) allowApps(route *mux.Route) *mux.Route {
	appAnnotated.Store(route, struct{}{})
	return route
}

var pathParam = regexp.MustCompile(`\{[^{}]*(\{[^{}]*\}[^{}]*)*\}`)

// appRouteKey is "METHOD path" with every parameter written {}.
func appRouteKey(method, template string) string {
	return method + " " + pathParam.ReplaceAllString(template, "{}")
}

// appGate returns nil when an app may use the matched route, else
// permission_denied naming where to do it instead.
func (s *Server) appGate(r *http.Request) error {
	route := mux.CurrentRoute(r)
	if route == nil {
		return nil // no route matched: the router answers not_found
	}
	if _, ok := appAnnotated.Load(route); ok {
		return nil
	}
	tmpl, err := route.GetPathTemplate()
	if err != nil {
		return appDenied(r.URL.Path)
	}
	if appRoutes[appRouteKey(r.Method, tmpl)] {
		return nil
	}
	return appDenied(pathParam.ReplaceAllString(tmpl, "{}"))
}

func appDenied(path string) error {
	what, where, best := "this route", "the console", -1
	for _, d := range appDenials {
		if (path == d.prefix || strings.HasPrefix(path, d.prefix+"/")) && len(d.prefix) > best {
			what, where, best = d.what, d.where, len(d.prefix)
		}
	}
	return domain.Auth{Kind: domain.PrincipalApp}.DenyApp(what, where)
}
