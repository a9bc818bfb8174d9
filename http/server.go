// Package httpapi is phonefleet's HTTP edge: the REST control surface /v1, and
// beside it the health probe, the OpenAPI document and (mounted by later
// areas) the device surface /vrx and the agent surface /mcp. It assembles
// the server: the router, authentication, CORS and rate limits, each
// surface's mount, all inside the middleware chain of package kernel, which
// also owns the code→status map, the handler adapter and the error
// renderers every surface shares.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands"
	"phonefleet/http/contract"
	"phonefleet/http/kernel"
)

// DefaultShutdownTimeout bounds how long Serve waits for in-flight requests
// once its context is cancelled.
const DefaultShutdownTimeout = 30 * time.Second

// Deps is what the HTTP edge needs from the rest of the program. Zero values
// take the documented defaults.
type Deps struct {
	// Logger receives the access log; nil logs JSON to standard error.
	Logger *slog.Logger
	// Mode is "local" (the default when empty) or "hosted".
	Mode string
	// Health reports the state of the database and projections for
	// GET /healthz; nil reports healthy with no projections.
	Health HealthReporter
	// BodyLimit is the request body limit in bytes; zero or less means
	// kernel.DefaultBodyLimit.
	BodyLimit int64
	// ShutdownTimeout bounds the graceful shutdown in Serve; zero or less
	// means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Auth resolves each /v1 (and /mcp) request to an authorization
	// context; nil means local mode's unauthenticated operator of
	// LocalOrgID (spec 5.7).
	Auth Authenticator
	// LocalOrgID is the local deployment's single organisation.
	LocalOrgID string
	// App is the application object every route runs its command or query
	// on; nil serves none of them (each answers service_unavailable).
	App *commands.Application
	// Identity configures the edge's identity features (identity.go).
	Identity IdentityDeps
	// MCP is the agent tool surface (package mcp), served at /mcp behind
	// authentication; nil answers service_unavailable there.
	MCP http.Handler
	// Console configures the console's sign-in (hosted mode).
	Console ConsoleDeps
	// VRX is the device surface (package vrx), served at /vrx/ without
	// authentication (its credential is the run token in the path); nil
	// answers not_found there.
	VRX http.Handler
	// GatewayTunnel serves gateways' tunnels (GET /gateway/v1/tunnel: the
	// gateway hub, which checks the gateway credential and upgrades); nil
	// answers service_unavailable there.
	GatewayTunnel kernel.HandlerFunc
	// Contract is the changelog served at /api/changelog.json and the
	// registry of deprecations and meaning changes marked in the document
	// and on answers (evolution.go); nil is contract.Current(), the
	// committed changelog and the production registry, which is empty.
	Contract *contract.Evolution
}

// Server is the HTTP edge. Areas register their routes on Router; Handler is
// the router wrapped in the middleware chain.
type Server struct {
	logger          *slog.Logger
	mode            string
	deps            Deps
	app             commands.Application
	auth            Authenticator
	health          HealthReporter
	shutdownTimeout time.Duration

	router       *mux.Router
	v1           *mux.Router // /v1, behind authentication
	fingerprints []byte      // spec 9.7, computed from the document once
	changelog    []byte      // spec 9.11, as published
	handler      http.Handler
	openapi      []byte
}

// New builds the server and mounts every area's routes. It panics if the
// embedded OpenAPI fragments do not assemble (a duplicate path or component):
// that is a defect of the build, which the package tests catch, not a
// condition of the deployment.
func New(deps Deps) *Server {
	s := &Server{
		logger:          deps.Logger,
		mode:            deps.Mode,
		deps:            deps,
		auth:            deps.Auth,
		health:          deps.Health,
		shutdownTimeout: deps.ShutdownTimeout,
	}
	if s.logger == nil {
		s.logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if deps.App != nil {
		s.app = *deps.App
	} else {
		s.app = commands.NewApplication(commands.Capabilities{})
	}
	if s.mode == "" {
		s.mode = "local"
	}
	if s.shutdownTimeout <= 0 {
		s.shutdownTimeout = DefaultShutdownTimeout
	}
	evolution := contract.Current()
	if deps.Contract != nil {
		evolution = *deps.Contract
	}
	if err := evolution.Registry.Validate(); err != nil {
		panic(fmt.Sprintf("httpapi: contract registry: %v", err))
	}
	doc, err := embeddedOpenAPI()
	if err != nil {
		panic(fmt.Sprintf("httpapi: %v", err))
	}
	if s.openapi, err = markEvolution(doc, evolution.Registry); err != nil {
		panic(fmt.Sprintf("httpapi: %v", err))
	}
	if s.fingerprints, err = contractFingerprints(s.openapi); err != nil {
		panic(fmt.Sprintf("httpapi: contract fingerprints: %v", err))
	}
	if s.changelog, err = evolution.Changelog.Published(); err != nil {
		panic(fmt.Sprintf("httpapi: contract changelog: %v", err))
	}

	// SkipClean: a non-canonical path (//healthz, /v1/../x) answers the
	// not_found envelope instead of mux's bare 301 redirect, which no
	// contract describes.
	s.router = mux.NewRouter().SkipClean(true)
	s.router.NotFoundHandler = kernel.HandlerFunc(s.notFound)
	s.router.MethodNotAllowedHandler = kernel.HandlerFunc(s.notFound)
	s.registerHealthRoutes(s.router)
	s.registerOpenAPIRoutes(s.router)
	s.registerContractRoutes(s.router)
	s.registerDiscoveryRoutes(s.router)
	s.registerIdentityWebhookRoutes(s.router)
	s.registerPaymentWebhookRoutes(s.router)
	// Before /v1's subrouter, which would authenticate them: the CLI has
	// no credential yet when it starts and polls a sign-in.
	s.registerCLISessionPublicRoutes(s.router)
	// Also before /v1's subrouter: the signing keys are public.
	s.registerSigningKeyPublicRoutes(s.router)
	s.registerConsoleRoutes(s.router)
	s.registerGatewaySurfaceRoutes(s.router)
	if s.auth == nil {
		s.auth = localOperator{orgID: deps.LocalOrgID}
	}
	s.v1 = s.router.PathPrefix("/v1").Subrouter()
	s.v1.NotFoundHandler = kernel.HandlerFunc(s.notFound)
	s.v1.MethodNotAllowedHandler = kernel.HandlerFunc(s.notFound)
	s.v1.Use(s.authenticate)
	s.registerIdentityRoutes(s.v1)
	// Before the fleet's /v1/receipts/{idempotencyKey}, which would take "export".
	s.registerReceiptExportRoutes(s.v1)
	s.registerCheckpointRoutes(s.v1)
	// Before the fleet's /v1/devices/{deviceId}, which would take "take".
	s.registerPoolRoutes(s.v1)
	s.registerFleetRoutes(s.v1)
	s.registerWebhookRoutes(s.v1)
	s.registerNotificationRoutes(s.v1)
	s.registerTimeRoutes(s.v1)
	s.registerRunRoutes(s.v1)
	s.registerScheduleRoutes(s.v1)
	s.registerStreamRoutes(s.v1)
	s.registerWaitRoutes(s.v1)
	s.registerCheckoutRoutes(s.v1)
	s.registerFulfilmentRoutes(s.v1)
	s.registerBillingRoutes(s.v1)
	s.registerUsageRoutes(s.v1)
	s.registerCLISessionRoutes(s.v1)
	s.registerConsoleEventRoutes(s.v1)
	s.registerOperatorRoutes(s.v1)
	s.registerGatewayRoutes(s.v1)
	s.registerAppRoutes(s.v1)
	s.registerProxyRoutes(s.v1)
	s.registerCopilotRoutes(s.v1)
	s.registerMCPRoutes(s.router)
	if deps.VRX != nil {
		s.router.PathPrefix("/vrx/").Handler(deps.VRX)
	}
	// /tasks and /runs (spec 9.4) are deliberately not mounted: they answer
	// not_found like any other unserved path.
	if mw := deprecationHeaders(s.router, evolution.Registry.Operations()); mw != nil {
		s.router.Use(mw)
	}

	// The middleware chain. Each wrap goes around the one before, so the last
	// wrap is the outermost; on the wire a request passes
	//   request id → access log → panic recovery → body limit (kernel.Chain)
	//   → [seam] → router.
	var h http.Handler = s.router
	// ---- Seam: later work wraps h here, in this order in code ----
	h = s.cors(h)      // preflights, origin_not_allowed, keys from web pages (spec 9.2, 5.3.7)
	h = s.rateLimit(h) // hosted only; counts every request, refused before any work (spec 8)
	// so that on the wire rate limiting comes first: a preflight and a
	// refused origin are counted like any request, and a caller over budget
	// gets 429 before CORS, routing or authentication look at it. (The
	// body limit's refusal of a declared Content-Length, in kernel.Chain,
	// reads nothing and so stays outermost.) Authentication is not a wrap
	// here: it goes on the /v1 and /mcp subrouters (Router.Use), because
	// /healthz, /openapi.json, discovery and /vrx take no bearer token.
	// ---- end of seam ----
	s.handler = kernel.Chain(h, kernel.Options{Logger: s.logger, BodyLimit: deps.BodyLimit, Errors: writeError})
	return s
}

// Handler returns the router wrapped in the middleware chain; it is what
// Serve serves and what tests drive directly.
func (s *Server) Handler() http.Handler { return s.handler }

// Router returns the router each area registers its routes on. Routes added
// after New are served too, because the chain wraps the router itself.
func (s *Server) Router() *mux.Router { return s.router }

// Serve answers requests on ln until ctx is cancelled, then shuts down
// gracefully: it stops accepting, lets in-flight requests finish within the
// shutdown timeout, and returns. It returns nil after a clean shutdown, the
// listener's error if serving fails, and an error if in-flight requests
// outlived the timeout (their connections are then closed).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	// The request contexts are not derived from ctx, so in-flight requests are
	// not cancelled by the shutdown signal itself.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if err != nil {
		_ = srv.Close()
		err = fmt.Errorf("graceful shutdown: %w", err)
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("serve: %w", serr)
	}
	return err
}
