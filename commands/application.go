package commands

import (
	"log/slog"

	"phonefleet/commands/apps"
	"phonefleet/commands/checkpoints"
	"phonefleet/commands/console"
	"phonefleet/commands/copilot"
	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/commands/gateways"
	"phonefleet/commands/keys"
	"phonefleet/commands/notifications"
	"phonefleet/commands/provisioning"
	"phonefleet/commands/proxies"
	"phonefleet/commands/runs"
	"phonefleet/commands/schedules"
	"phonefleet/commands/webhooks"
)

// Application is the service's one application object: every command and
// query of every capability, built once by NewApplication and handed to
// every surface (REST, MCP, the device surface, the console, the payment
// provider's and identity webhooks, the gateway hub, the reactors, the
// CLI, forwarded device calls). Each entry point is a cqrs.Handler: the
// capability's handler behind the one decorator. A capability the
// deployment does not serve is left at its zero value, whose every entry
// point answers service_unavailable.
type Application struct {
	Fleet        fleet.Handlers
	Keys         keys.Handlers
	Webhooks     webhooks.Handlers
	Runs         runs.Handlers
	Schedules    schedules.Handlers
	Provisioning provisioning.Handlers
	Gateways     gateways.Handlers
	Console      console.Handlers
	// Notifications: a person's notifications and preferences.
	Notifications notifications.Handlers
	Apps          apps.Handlers
	Proxies       proxies.Handlers
	Copilot       copilot.Handlers
	// Checkpoints: the receipt signing keys and the signed checkpoints.
	Checkpoints checkpoints.Handlers
}

// Capabilities are what the application object is built from. A
// capability left nil is not served by the deployment.
type Capabilities struct {
	Fleet    *fleet.Fleet
	APIKeys  *keys.Keys
	Webhooks *webhooks.Capability
	Runs     *runs.Runs
	// Schedules' firings start runs through the application's StartRun:
	// without Runs, a firing is recorded failed (service_unavailable).
	Schedules *schedules.Schedules
	// Provisioning is the price list, checkout, the payment provider's
	// webhook, fulfilments, admission, billing, usage and the
	// pay-as-you-go pool.
	Provisioning *provisioning.Provisioning
	// Gateways is gateway enrollment, credentials, connections and
	// releases.
	Gateways *gateways.Gateways
	// Console is CLI sign-in (it mints keys through the application's key
	// commands), the console's telemetry and the operator views.
	Console *console.Console
	// Notifications is a person's notifications, their preferences and
	// the records of the reactions that raise and e-mail them.
	Notifications *notifications.Capability
	// Apps is the app store (catalog, installations) and the app library
	// (device capabilities, inventory, refreshes).
	Apps *apps.Apps
	// Proxies is managed proxies: products, quotes, orders, the proxies
	// paid orders issue and the operations on them.
	Proxies *proxies.Proxies
	// Copilot is the person's chat-driven device control; it acts through
	// the application's fleet entry points.
	Copilot *copilot.Copilot
	// Checkpoints is the receipt signing keys and the checkpoints they
	// sign of each organisation's receipt chain.
	Checkpoints *checkpoints.Checkpoints
	// Logger receives one debug line per command and query (name, time
	// taken, error code); nil discards.
	Logger *slog.Logger
}

// NewApplication builds the application object once, for every surface:
// each capability's entry points, in the order one needs another's.
func NewApplication(c Capabilities) Application {
	d := cqrs.Decorator{Logger: c.Logger}
	var app Application
	if c.Fleet != nil {
		app.Fleet = c.Fleet.Handlers(d)
	}
	if c.APIKeys != nil {
		app.Keys = c.APIKeys.Handlers(d)
	}
	if c.Webhooks != nil {
		app.Webhooks = c.Webhooks.Handlers(d)
	}
	if c.Runs != nil {
		app.Runs = c.Runs.Handlers(d)
	}
	if c.Schedules != nil {
		app.Schedules = c.Schedules.Handlers(d)
	}
	if c.Provisioning != nil {
		app.Provisioning = c.Provisioning.Handlers(d)
	}
	if c.Gateways != nil {
		app.Gateways = c.Gateways.Handlers(d)
	}
	if c.Console != nil {
		app.Console = c.Console.Handlers(d, console.KeyMinter{Mint: app.Keys.MintAPIKey})
	}
	if c.Notifications != nil {
		app.Notifications = c.Notifications.Handlers(d)
	}
	if c.Apps != nil {
		app.Apps = c.Apps.Handlers(d)
	}
	if c.Proxies != nil {
		app.Proxies = c.Proxies.Handlers(d)
	}
	if c.Checkpoints != nil {
		app.Checkpoints = c.Checkpoints.Handlers(d)
	}
	if c.Copilot != nil {
		f := app.Fleet
		app.Copilot = c.Copilot.Handlers(d, copilot.Devices{GetDevice: f.GetDevice, ListDevices: f.ListDevices, ListLeases: f.ListLeases,
			AcquireLease: f.AcquireLease, ReleaseLease: f.ReleaseLease, Observe: f.ObserveDevice, Act: f.PerformAction,
			WaitFor: f.WaitFor, StartRun: app.Runs.StartRun})
	}
	return app
}
