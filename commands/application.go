package commands

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/releases"
	"phonefleet/projections"
)

// Handler is the shape of every entry point of the application, command
// or query: one request value in, one answer out. Each handler checks the
// caller's scopes and tenancy itself, so a surface (REST, MCP, the CLI)
// only translates requests and errors.
type Handler[C, R any] interface {
	Handle(ctx context.Context, c C) (R, error)
}

// HandlerFunc is a function used as a Handler.
type HandlerFunc[C, R any] func(ctx context.Context, c C) (R, error)

// Handle calls f.
func (f HandlerFunc[C, R]) Handle(ctx context.Context, c C) (R, error) { return f(ctx, c) }

// Done is the answer of a command that answers nothing but success.
type Done struct{}

// Application is the service's one application object: every command and
// query, built once by the wiring (NewApplication) and handed to every
// surface. Every entry point is wrapped by one decorator that logs and
// times it, so handlers never log.
type Application struct {
	Commands Commands
	Queries  Queries
}

// Commands are the application's writes.
type Commands struct {
	AcquireLease    Handler[AcquireLease, projections.LeaseView]
	RenewLease      Handler[RenewLease, projections.LeaseView]
	ReleaseLease    Handler[ReleaseLease, Done]
	ExpireLease     Handler[ExpireLease, bool]
	ResetDevice     Handler[ResetDevice, bool]
	PerformAction   Handler[PerformAction, ActOutcome]
	ObserveDevice   Handler[ObserveDevice, Observation]
	WaitFor         Handler[WaitFor, WaitResult]
	PowerDevice     Handler[PowerDevice, projections.DeviceView]
	RenameDevice    Handler[RenameDevice, projections.DeviceView]
	ReviewReceipt   Handler[ReviewReceipt, domain.Receipt]
	RegisterDevices Handler[RegisterDevices, []string]
	// RecordDeviceConnection is sent by device discovery.
	RecordDeviceConnection Handler[RecordDeviceConnection, bool]
	// Live sessions: join (or open) in a role, end.
	JoinLiveSession Handler[JoinLiveSession, JoinedLiveSession]
	EndLiveSession  Handler[EndLiveSession, Done]

	MintAPIKey   Handler[MintAPIKey, MintedAPIKey]
	RotateAPIKey Handler[RotateAPIKey, MintedAPIKey]
	RenewAPIKey  Handler[RenewAPIKey, Done]
	NarrowAPIKey Handler[NarrowAPIKey, Done]
	RevokeAPIKey Handler[RevokeAPIKey, Done]

	CreateWebhook                 Handler[CreateWebhook, CreatedWebhook]
	SetWebhookEnabled             Handler[SetWebhookEnabled, Done]
	RotateWebhookSecret           Handler[RotateWebhookSecret, string]
	DeleteWebhook                 Handler[DeleteWebhook, Done]
	TestWebhook                   Handler[TestWebhook, string]
	DisableDepartedPersonWebhooks Handler[DisableDepartedPersonWebhooks, int]

	StartRun      Handler[StartRun, StartedRun]
	PauseRun      Handler[PauseRun, projections.RunView]
	ResumeRun     Handler[ResumeRun, projections.RunView]
	CancelRun     Handler[CancelRun, projections.RunView]
	ClaimRun      Handler[ClaimRun, domain.Run]
	EndOverdueRun Handler[EndOverdueRun, bool]
	// The device surface: a run acting on its device.
	RunObserve   Handler[RunObserve, RunObservation]
	RunAct       Handler[RunAct, ActOutcome]
	RunNeedsUser Handler[RunNeedsUser, projections.RunView]
	RunFinish    Handler[RunFinish, projections.RunView]

	CreateSchedule Handler[CreateSchedule, projections.ScheduleView]
	UpdateSchedule Handler[UpdateSchedule, projections.ScheduleView]
	DeleteSchedule Handler[DeleteSchedule, Done]
	// The firing worker's: record a firing's intent, its outcome, or settle
	// one whose instance stopped.
	FireSchedule           Handler[FireSchedule, ScheduleFiring]
	CompleteScheduleFiring Handler[CompleteScheduleFiring, bool]
	ResolveScheduleFiring  Handler[ResolveScheduleFiring, string]

	// The payment provider's webhook (POST /webhooks/stripe).
	ReceiveProviderEvent Handler[ReceiveProviderEvent, ProviderEventReceipt]
	// Fulfilments: the customer's Cancel, Return and cancel-renewal
	// (/v1/fulfilments/{id}/…), the owner's refund (phonefleet fulfilments
	// refund) and the fulfilment sweeps' step on one fulfilment.
	CancelFulfilment        Handler[CancelFulfilment, projections.FulfilmentView]
	ReturnFulfilment        Handler[ReturnFulfilment, projections.FulfilmentView]
	CancelFulfilmentRenewal Handler[CancelFulfilmentRenewal, FulfilmentRenewal]
	RefundFulfilment        Handler[RefundFulfilment, domain.Fulfilment]
	SweepFulfilment         Handler[SweepFulfilment, string]

	// The shared pay-as-you-go pool: take a unit (POST /v1/devices/take);
	// the pool-returns worker's pass putting back those whose lease ended.
	TakePoolDevice    Handler[TakePoolDevice, TakenPoolDevice]
	ReturnPoolDevices Handler[ReturnPoolDevices, int]

	// OpenBillingPortal opens the provider's billing portal (POST
	// /v1/billing/portal-sessions).
	OpenBillingPortal Handler[OpenBillingPortal, BillingPortalSession]

	// StartCheckout begins a purchase (POST /v1/checkout-sessions).
	StartCheckout Handler[StartCheckout, CheckoutAnswer]

	// CLI sign-in (/v1/cli-sessions): a CLI starts a session and polls
	// it; a signed-in person approves (minting a key) or denies it.
	StartCLISession   Handler[StartCLISession, StartedCLISession]
	PollCLISession    Handler[PollCLISession, CLISessionPoll]
	ApproveCLISession Handler[ApproveCLISession, CLISessionView]
	DenyCLISession    Handler[DenyCLISession, CLISessionView]

	// RecordConsoleEvents records a console page's telemetry (POST
	// /v1/console/events).
	RecordConsoleEvents Handler[RecordConsoleEvents, RecordedConsoleEvents]

	// Gateways (issue 14): an admin's one-time enrollment code, its
	// exchange for a gateway's credential, and revocation.
	CreateGatewayEnrollmentCode Handler[CreateGatewayEnrollmentCode, CreatedGatewayEnrollmentCode]
	EnrollGateway               Handler[EnrollGateway, EnrolledGateway]
	RevokeGateway               Handler[RevokeGateway, Done]
}

// Queries are the application's reads. They answer from read models that
// the commands wait for, so a caller reads its own writes.
type Queries struct {
	ListDevices  Handler[ListDevices, DevicePage]
	GetDevice    Handler[GetDevice, projections.DeviceView]
	GetDriving   Handler[GetDriving, Driving]
	ListLeases   Handler[ListLeases, LeasePage]
	GetFrame     Handler[GetFrame, Frame]
	ListReceipts Handler[ListReceipts, ReceiptPage]
	GetReceipt   Handler[GetReceipt, domain.Receipt]
	// Live screens and sessions.
	OpenStream     Handler[OpenStream, *ScreenStream]
	GetLiveSession Handler[GetLiveSession, LiveSessionView]

	// ExportReceipts answers the receipt chain (GET /v1/receipts/export).
	ExportReceipts Handler[ExportReceipts, ReceiptExport]

	ListAPIKeys Handler[ListAPIKeys, []projections.APIKeyRecord]
	GetAPIKey   Handler[GetAPIKey, projections.APIKeyRecord]

	ListWebhooks   Handler[ListWebhooks, []projections.WebhookView]
	GetWebhook     Handler[GetWebhook, projections.WebhookView]
	ListDeliveries Handler[ListDeliveries, DeliveryPage]

	ListRuns      Handler[ListRuns, projections.RunPage]
	GetRun        Handler[GetRun, projections.RunView]
	ListRunFrames Handler[ListRunFrames, projections.RunFramePage]
	GetRunScript  Handler[GetRunScript, RunScript]
	// The device surface's reads.
	RunInfo     Handler[RunInfo, projections.RunView]
	RunGetFrame Handler[RunGetFrame, Frame]

	ListSchedules       Handler[ListSchedules, projections.SchedulePage]
	GetSchedule         Handler[GetSchedule, projections.ScheduleView]
	ListScheduleFirings Handler[ListScheduleFirings, projections.FiringPage]

	// Fulfilments (GET /v1/fulfilments, …/estimate-history,
	// …/renewal-status).
	ListFulfilments        Handler[ListFulfilments, projections.FulfilmentPage]
	GetFulfilmentEstimates Handler[GetFulfilmentEstimates, FulfilmentEstimates]
	GetFulfilmentRenewal   Handler[GetFulfilmentRenewal, FulfilmentRenewal]

	// GetUsage answers device time per billing period (GET /v1/usage).
	GetUsage Handler[GetUsage, UsageReport]

	// GetUpcomingInvoice answers the organisation's next invoice (GET
	// /v1/billing/upcoming).
	GetUpcomingInvoice Handler[GetUpcomingInvoice, UpcomingInvoice]

	// The price list with live inventory (GET /v1/skus) and the
	// organisation's onboarding and purchase status (GET /v1/admission).
	GetPriceList Handler[GetPriceList, PriceList]
	GetAdmission Handler[GetAdmission, Admission]

	// GetCLISessionByCode shows the CLI sign-in a user code names (GET
	// /v1/cli-sessions/by-code/{userCode}).
	GetCLISessionByCode Handler[GetCLISessionByCode, CLISessionView]
	// ListConsoleEvents pages through the console's telemetry (GET
	// /v1/console/events).
	ListConsoleEvents Handler[ListConsoleEvents, projections.ConsoleEventPage]

	// GetProjectionStatus answers every projection's state, lag and
	// rebuild progress (GET /v1/operators/projections).
	GetProjectionStatus Handler[GetProjectionStatus, ProjectionStatus]

	// Gateways (issue 14): the organisation's gateways (GET /v1/gateways),
	// a gateway credential's check, and the current release of a channel
	// (GET /gateway/v1/releases/current).
	ListGateways        Handler[ListGateways, []projections.GatewayView]
	AuthenticateGateway Handler[AuthenticateGateway, GatewayPrincipal]
	CurrentRelease      Handler[CurrentRelease, releases.Release]
}

// APIKeys is what the key commands and queries need.
type APIKeys struct {
	Deps   APIKeyDeps
	Hasher SecretHasher
	// Grace is how long a rotated key's old secret keeps working.
	Grace  time.Duration
	Reader projections.APIKeyReader
}

// WebhookCapability is what the webhook commands and queries need.
type WebhookCapability struct {
	Webhooks
	// Create checks addresses with its policy and resolver.
	Create  CreateWebhookHandler
	Queries projections.WebhookQueries
}

// AppDeps are the capabilities the application is built from. A
// capability left nil is not served by the deployment: its commands and
// queries answer service_unavailable.
type AppDeps struct {
	Fleet    *Fleet
	APIKeys  *APIKeys
	Webhooks *WebhookCapability
	Runs     *Runs
	// Schedules' firings start runs through Commands.StartRun: without
	// Runs, a firing is recorded failed (service_unavailable).
	Schedules *ScheduleCapability
	// Provisioning is the price list, checkout, the payment provider's
	// webhook, fulfilments, admission, billing and the pay-as-you-go pool.
	Provisioning *Provisioning
	// Usage answers device time from the usage read model.
	Usage *UsageCapability
	// CLISessions is CLI sign-in; it mints keys through the key commands.
	CLISessions *CLISessions
	// ConsoleEvents is the console's telemetry.
	ConsoleEvents *ConsoleEvents
	// Operators answers the operator views (projection status).
	Operators *OperatorCapability
	// Gateways is gateway enrollment, credentials and releases.
	Gateways *GatewayCapability
	// Logger receives one debug line per command and query (name, time
	// taken, error code); nil discards.
	Logger *slog.Logger
}

// NewApplication builds the application object once, for every surface.
func NewApplication(d AppDeps) Application {
	l := d.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	var app Application
	c, q := &app.Commands, &app.Queries

	fleetDown := func() error {
		return domain.Errorf(domain.CodeServiceUnavailable, "the device fleet is not served by this deployment")
	}
	if f := d.Fleet; f != nil {
		set(l, &c.AcquireLease, f.AcquireLease())
		set(l, &c.RenewLease, f.RenewLease())
		set(l, &c.ReleaseLease, done(f.ReleaseLease().Handle))
		set(l, &c.ExpireLease, f.ExpireLease())
		set(l, &c.ResetDevice, f.ResetDevice())
		set(l, &c.PerformAction, f.PerformAction())
		set(l, &c.ObserveDevice, f.ObserveDevice())
		set(l, &c.WaitFor, f.WaitFor())
		set(l, &c.PowerDevice, f.PowerDevice())
		set(l, &c.RenameDevice, f.RenameDevice())
		set(l, &c.ReviewReceipt, f.ReviewReceipt())
		set(l, &c.RegisterDevices, f.RegisterDevices())
		set(l, &c.RecordDeviceConnection, f.RecordDeviceConnection())
		set(l, &q.ListDevices, HandlerFunc[ListDevices, DevicePage](func(ctx context.Context, r ListDevices) (DevicePage, error) {
			return f.ListDevices(ctx, r.Auth, r.DeviceQuery)
		}))
		set(l, &q.GetDevice, HandlerFunc[GetDevice, projections.DeviceView](func(ctx context.Context, r GetDevice) (projections.DeviceView, error) {
			return f.GetDevice(ctx, r.Auth, r.DeviceID)
		}))
		live, streams := NewLiveSessions(f), NewStreams(f)
		set(l, &c.JoinLiveSession, live.JoinLiveSession())
		set(l, &c.EndLiveSession, done(live.EndLiveSession().Handle))
		set(l, &q.OpenStream, streams.OpenStream())
		set(l, &q.GetLiveSession, live.GetLiveSession())
		set(l, &q.GetDriving, HandlerFunc[GetDriving, Driving](func(ctx context.Context, r GetDriving) (Driving, error) {
			d, err := f.Driving(ctx, r.Auth, r.DeviceID)
			if err != nil {
				return d, err
			}
			return live.WithLiveSession(ctx, r.Auth, d)
		}))
		set(l, &q.ListLeases, HandlerFunc[ListLeases, LeasePage](func(ctx context.Context, r ListLeases) (LeasePage, error) {
			return f.ListLeases(ctx, r.Auth, r.LeaseQuery)
		}))
		set(l, &q.GetFrame, HandlerFunc[GetFrame, Frame](func(ctx context.Context, r GetFrame) (Frame, error) {
			return f.GetFrame(ctx, r.Auth, r.FrameID, r.FrameOptions)
		}))
		set(l, &q.ListReceipts, HandlerFunc[ListReceipts, ReceiptPage](func(ctx context.Context, r ListReceipts) (ReceiptPage, error) {
			return f.ListReceipts(ctx, r.Auth, r.ReceiptQuery)
		}))
		set(l, &q.GetReceipt, HandlerFunc[GetReceipt, domain.Receipt](func(ctx context.Context, r GetReceipt) (domain.Receipt, error) {
			return f.GetReceipt(ctx, r.Auth, r.IdempotencyKey)
		}))
		set(l, &q.ExportReceipts, HandlerFunc[ExportReceipts, ReceiptExport](f.ExportReceipts))
	} else {
		unavailable(l, &c.AcquireLease, fleetDown)
		unavailable(l, &c.RenewLease, fleetDown)
		unavailable(l, &c.ReleaseLease, fleetDown)
		unavailable(l, &c.ExpireLease, fleetDown)
		unavailable(l, &c.ResetDevice, fleetDown)
		unavailable(l, &c.PerformAction, fleetDown)
		unavailable(l, &c.ObserveDevice, fleetDown)
		unavailable(l, &c.WaitFor, fleetDown)
		unavailable(l, &c.PowerDevice, fleetDown)
		unavailable(l, &c.RenameDevice, fleetDown)
		unavailable(l, &c.ReviewReceipt, fleetDown)
		unavailable(l, &c.RegisterDevices, fleetDown)
		unavailable(l, &c.RecordDeviceConnection, fleetDown)
		unavailable(l, &q.ListDevices, fleetDown)
		unavailable(l, &q.GetDevice, fleetDown)
		unavailable(l, &q.GetDriving, fleetDown)
		unavailable(l, &c.JoinLiveSession, fleetDown)
		unavailable(l, &c.EndLiveSession, fleetDown)
		unavailable(l, &q.OpenStream, fleetDown)
		unavailable(l, &q.GetLiveSession, fleetDown)
		unavailable(l, &q.ListLeases, fleetDown)
		unavailable(l, &q.GetFrame, fleetDown)
		unavailable(l, &q.ListReceipts, fleetDown)
		unavailable(l, &q.GetReceipt, fleetDown)
		unavailable(l, &q.ExportReceipts, fleetDown)
	}

	keysDown := func() error {
		return domain.Errorf(domain.CodeServiceUnavailable, "API keys are not served by this deployment")
	}
	if k := d.APIKeys; k != nil {
		set(l, &c.MintAPIKey, MintAPIKeyHandler{APIKeyDeps: k.Deps, Hasher: k.Hasher})
		set(l, &c.RotateAPIKey, RotateAPIKeyHandler{APIKeyDeps: k.Deps, Hasher: k.Hasher, Grace: k.Grace})
		set(l, &c.RenewAPIKey, done(RenewAPIKeyHandler{APIKeyDeps: k.Deps}.Handle))
		set(l, &c.NarrowAPIKey, done(NarrowAPIKeyHandler{APIKeyDeps: k.Deps}.Handle))
		set(l, &c.RevokeAPIKey, done(RevokeAPIKeyHandler{APIKeyDeps: k.Deps}.Handle))
		set(l, &q.ListAPIKeys, listAPIKeysHandler{k.Reader})
		set(l, &q.GetAPIKey, getAPIKeyHandler{k.Reader})
	} else {
		unavailable(l, &c.MintAPIKey, keysDown)
		unavailable(l, &c.RotateAPIKey, keysDown)
		unavailable(l, &c.RenewAPIKey, keysDown)
		unavailable(l, &c.NarrowAPIKey, keysDown)
		unavailable(l, &c.RevokeAPIKey, keysDown)
		unavailable(l, &q.ListAPIKeys, keysDown)
		unavailable(l, &q.GetAPIKey, keysDown)
	}

	webhooksDown := func() error {
		return domain.Errorf(domain.CodeServiceUnavailable, "webhooks are not served by this deployment")
	}
	if w := d.Webhooks; w != nil {
		create := w.Create
		create.Webhooks = w.Webhooks
		set(l, &c.CreateWebhook, create)
		set(l, &c.SetWebhookEnabled, done(SetWebhookEnabledHandler{w.Webhooks}.Handle))
		set(l, &c.RotateWebhookSecret, RotateWebhookSecretHandler{w.Webhooks})
		set(l, &c.DeleteWebhook, done(DeleteWebhookHandler{w.Webhooks}.Handle))
		set(l, &c.TestWebhook, TestWebhookHandler{w.Webhooks})
		set(l, &c.DisableDepartedPersonWebhooks, DisableDepartedPersonWebhooksHandler{w.Webhooks})
		set(l, &q.ListWebhooks, listWebhooksHandler{w.Queries})
		set(l, &q.GetWebhook, getWebhookHandler{w.Queries})
		set(l, &q.ListDeliveries, listDeliveriesHandler{w.Queries})
	} else {
		unavailable(l, &c.CreateWebhook, webhooksDown)
		unavailable(l, &c.SetWebhookEnabled, webhooksDown)
		unavailable(l, &c.RotateWebhookSecret, webhooksDown)
		unavailable(l, &c.DeleteWebhook, webhooksDown)
		unavailable(l, &c.TestWebhook, webhooksDown)
		unavailable(l, &c.DisableDepartedPersonWebhooks, webhooksDown)
		unavailable(l, &q.ListWebhooks, webhooksDown)
		unavailable(l, &q.GetWebhook, webhooksDown)
		unavailable(l, &q.ListDeliveries, webhooksDown)
	}

	runsDown := func() error {
		return domain.Errorf(domain.CodeServiceUnavailable, "runs are not served by this deployment")
	}
	if r := d.Runs; r != nil {
		set(l, &c.StartRun, HandlerFunc[StartRun, StartedRun](r.Start))
		set(l, &c.PauseRun, HandlerFunc[PauseRun, projections.RunView](r.Pause))
		set(l, &c.ResumeRun, HandlerFunc[ResumeRun, projections.RunView](r.Resume))
		set(l, &c.CancelRun, HandlerFunc[CancelRun, projections.RunView](r.Cancel))
		set(l, &c.ClaimRun, HandlerFunc[ClaimRun, domain.Run](r.Claim))
		set(l, &c.EndOverdueRun, HandlerFunc[EndOverdueRun, bool](r.EndOverdue))
		set(l, &c.RunObserve, HandlerFunc[RunObserve, RunObservation](r.Observe))
		set(l, &c.RunAct, HandlerFunc[RunAct, ActOutcome](r.Act))
		set(l, &c.RunNeedsUser, HandlerFunc[RunNeedsUser, projections.RunView](r.NeedsUser))
		set(l, &c.RunFinish, HandlerFunc[RunFinish, projections.RunView](r.Finish))
		set(l, &q.ListRuns, HandlerFunc[ListRuns, projections.RunPage](r.List))
		set(l, &q.GetRun, HandlerFunc[GetRun, projections.RunView](r.Get))
		set(l, &q.ListRunFrames, HandlerFunc[ListRunFrames, projections.RunFramePage](r.Frames))
		set(l, &q.GetRunScript, HandlerFunc[GetRunScript, RunScript](r.Script))
		set(l, &q.RunInfo, HandlerFunc[RunInfo, projections.RunView](r.Info))
		set(l, &q.RunGetFrame, HandlerFunc[RunGetFrame, Frame](r.GetFrame))
	} else {
		unavailable(l, &c.StartRun, runsDown)
		unavailable(l, &c.PauseRun, runsDown)
		unavailable(l, &c.ResumeRun, runsDown)
		unavailable(l, &c.CancelRun, runsDown)
		unavailable(l, &c.ClaimRun, runsDown)
		unavailable(l, &c.EndOverdueRun, runsDown)
		unavailable(l, &c.RunObserve, runsDown)
		unavailable(l, &c.RunAct, runsDown)
		unavailable(l, &c.RunNeedsUser, runsDown)
		unavailable(l, &c.RunFinish, runsDown)
		unavailable(l, &q.ListRuns, runsDown)
		unavailable(l, &q.GetRun, runsDown)
		unavailable(l, &q.ListRunFrames, runsDown)
		unavailable(l, &q.GetRunScript, runsDown)
		unavailable(l, &q.RunInfo, runsDown)
		unavailable(l, &q.RunGetFrame, runsDown)
	}

	schedulesDown := func() error {
		return domain.Errorf(domain.CodeServiceUnavailable, "schedules are not served by this deployment")
	}
	if sc := d.Schedules; sc != nil {
		set(l, &c.CreateSchedule, CreateScheduleHandler{sc})
		set(l, &c.UpdateSchedule, UpdateScheduleHandler{sc})
		set(l, &c.DeleteSchedule, done(DeleteScheduleHandler{sc}.Handle))
		set(l, &c.FireSchedule, FireScheduleHandler{sc})
		set(l, &c.CompleteScheduleFiring, CompleteScheduleFiringHandler{sc})
		set(l, &c.ResolveScheduleFiring, ResolveScheduleFiringHandler{sc})
		set(l, &q.ListSchedules, HandlerFunc[ListSchedules, projections.SchedulePage](sc.ListSchedules))
		set(l, &q.GetSchedule, HandlerFunc[GetSchedule, projections.ScheduleView](sc.GetSchedule))
		set(l, &q.ListScheduleFirings, HandlerFunc[ListScheduleFirings, projections.FiringPage](sc.ListScheduleFirings))
	} else {
		unavailable(l, &c.CreateSchedule, schedulesDown)
		unavailable(l, &c.UpdateSchedule, schedulesDown)
		unavailable(l, &c.DeleteSchedule, schedulesDown)
		unavailable(l, &c.FireSchedule, schedulesDown)
		unavailable(l, &c.CompleteScheduleFiring, schedulesDown)
		unavailable(l, &c.ResolveScheduleFiring, schedulesDown)
		unavailable(l, &q.ListSchedules, schedulesDown)
		unavailable(l, &q.GetSchedule, schedulesDown)
		unavailable(l, &q.ListScheduleFirings, schedulesDown)
	}

	registerProvisioning(l, d.Provisioning, c, q)
	registerOperators(l, d.Operators, q)

	if u := d.Usage; u != nil {
		set(l, &q.GetUsage, HandlerFunc[GetUsage, UsageReport](u.GetUsage))
	} else {
		unavailable(l, &q.GetUsage, func() error {
			return domain.Errorf(domain.CodeServiceUnavailable, "usage is not served by this deployment")
		})
	}

	registerCLISessions(l, d.CLISessions, c, q)
	registerConsoleEvents(l, d.ConsoleEvents, c, q)
	registerGateways(l, d.Gateways, c, q)

	return app
}

// done adapts a command that answers only an error.
func done[C any](h func(context.Context, C) error) Handler[C, Done] {
	return HandlerFunc[C, Done](func(ctx context.Context, c C) (Done, error) { return Done{}, h(ctx, c) })
}

// set puts h, decorated, in place.
func set[C, R any](l *slog.Logger, dst *Handler[C, R], h Handler[C, R]) {
	*dst = Logged(l, h)
}

// Logged is the one decorator of every command and query, for a handler
// sent from outside the application object (the device runtime's host
// takeover pass, which is wired before the application object exists):
// the name logged is the request type's.
func Logged[C, R any](l *slog.Logger, h Handler[C, R]) Handler[C, R] {
	return logged[C, R]{logger: l, name: strings.TrimPrefix(fmt.Sprintf("%T", *new(C)), "commands."), next: h}
}

// unavailable makes *dst answer why for a capability the deployment lacks.
func unavailable[C, R any](l *slog.Logger, dst *Handler[C, R], why func() error) {
	set(l, dst, Handler[C, R](HandlerFunc[C, R](func(context.Context, C) (R, error) {
		var zero R
		return zero, why()
	})))
}

// logged is the one decorator of every command and query: it logs the
// entry point's name, how long it took and, when it failed, the error code
// (the cause of a server fault is logged once, by the surface answering
// it).
type logged[C, R any] struct {
	logger *slog.Logger
	name   string
	next   Handler[C, R]
}

func (h logged[C, R]) Handle(ctx context.Context, c C) (R, error) {
	start := time.Now()
	r, err := h.next.Handle(ctx, c)
	if h.logger.Enabled(ctx, slog.LevelDebug) {
		attrs := []slog.Attr{slog.String("op", h.name), slog.Duration("took", time.Since(start))}
		if err != nil {
			var de *domain.Error
			code := string(domain.CodeInternal)
			if errors.As(err, &de) {
				code = string(de.Code)
			}
			attrs = append(attrs, slog.String("code", code))
		}
		if m, merr := eventstore.MetadataFrom(ctx); merr == nil {
			attrs = append(attrs, slog.String("request_id", m.RequestID))
		}
		h.logger.LogAttrs(ctx, slog.LevelDebug, "application", attrs...)
	}
	return r, err
}
