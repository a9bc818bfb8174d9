package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/console"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// PollTokenHeader carries a CLI's poll token on GET /v1/cli-sessions/{id}.
// It is a header, not a query parameter, so it never reaches an access log
// or a proxy's; and not Authorization, which names a credential of spec
// 5.1 (and would put the poll under the authenticated rate budget).
const PollTokenHeader = "X-Poll-Token"

// registerCLISessionPublicRoutes mounts the two routes of CLI sign-in a
// CLI calls before it has any credential: start a session, and poll it
// with its poll token. They are mounted on the server's router ahead of
// the /v1 subrouter, so /v1's authentication does not run for them (a
// hosted deployment would refuse the CLI 401); CORS and the rate limit,
// which wrap the whole router, still apply. No Authorization header is
// read.
func (s *Server) registerCLISessionPublicRoutes(r *mux.Router) {
	r.Handle("/v1/cli-sessions", kernel.HandlerFunc(s.startCLISession)).Methods(http.MethodPost)
	r.Handle("/v1/cli-sessions/{sessionId}", kernel.HandlerFunc(s.pollCLISession)).Methods(http.MethodGet)
}

// registerCLISessionRoutes mounts the routes of CLI sign-in a signed-in
// person uses from the console: see what a code asks for, approve it
// (minting a key) or deny it. The handlers refuse keys and apps (and the
// app gate refuses apps first).
func (s *Server) registerCLISessionRoutes(r *mux.Router) {
	r.Handle("/cli-sessions/by-code/{userCode}", kernel.HandlerFunc(s.getCLISessionByCode)).Methods(http.MethodGet)
	r.Handle("/cli-sessions/{sessionId}/approve", kernel.HandlerFunc(s.approveCLISession)).Methods(http.MethodPost)
	r.Handle("/cli-sessions/{sessionId}/deny", kernel.HandlerFunc(s.denyCLISession)).Methods(http.MethodPost)
}

// cliSignInActor is the actor of the events a CLI's own requests record
// (its session's start and the hand-over of its key): it has no
// credential yet, so the service's CLI sign-in acts.
func cliSignInActor(r *http.Request) *http.Request {
	return r.WithContext(eventstore.WithActor(r.Context(), "system", "cli-sign-in"))
}

type startCLISessionBody struct {
	PublicKey  string         `json:"publicKey"`
	ClientName string         `json:"clientName"`
	Host       string         `json:"host"`
	Scopes     []domain.Scope `json:"scopes"`
}

// cliBaseURL is where the console that approves a code is: {base_url} in
// hosted mode; in local mode the address the CLI reached the service at
// (a loopback address, which the person's browser on the same computer
// reaches too), because the configured default names the listen address,
// whose port may be 0.
func (s *Server) cliBaseURL(r *http.Request) string {
	if s.mode == "hosted" {
		return s.baseURL(r)
	}
	return requestBase(r)
}

func (s *Server) startCLISession(w http.ResponseWriter, r *http.Request) error {
	r = cliSignInActor(r)
	var body startCLISessionBody
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	started, err := s.app.Console.StartCLISession.Handle(r.Context(), console.StartCLISession{
		CLISessionRequest: domain.CLISessionRequest{PublicKey: body.PublicKey, ClientName: body.ClientName, Host: body.Host, Scopes: body.Scopes}})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusCreated, wire.NewStartedCLISession(started, s.cliBaseURL(r)))
}

func (s *Server) pollCLISession(w http.ResponseWriter, r *http.Request) error {
	r = cliSignInActor(r)
	p, err := s.app.Console.PollCLISession.Handle(r.Context(), console.PollCLISession{SessionID: mux.Vars(r)["sessionId"],
		PollToken: r.Header.Get(PollTokenHeader)})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCLISessionPoll(p))
}

func (s *Server) getCLISessionByCode(w http.ResponseWriter, r *http.Request) error {
	// A pending code is what a person types to approve: keep it out of
	// the access log.
	kernel.LogPath(r.Context(), "/v1/cli-sessions/by-code/{userCode}")
	v, err := s.app.Console.GetCLISessionByCode.Handle(r.Context(), console.GetCLISessionByCode{Auth: authOf(r), UserCode: mux.Vars(r)["userCode"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCLISession(v))
}

type decideCLISessionBody struct {
	UserCode string         `json:"userCode"`
	Scopes   []domain.Scope `json:"scopes"`
}

func (s *Server) approveCLISession(w http.ResponseWriter, r *http.Request) error {
	var body decideCLISessionBody
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	v, err := s.app.Console.ApproveCLISession.Handle(r.Context(), console.ApproveCLISession{Auth: authOf(r),
		SessionID: mux.Vars(r)["sessionId"], UserCode: body.UserCode, Scopes: body.Scopes})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCLISession(v))
}

func (s *Server) denyCLISession(w http.ResponseWriter, r *http.Request) error {
	var body decideCLISessionBody
	if err := kernel.DecodeJSON(r, &body); err != nil {
		return err
	}
	v, err := s.app.Console.DenyCLISession.Handle(r.Context(), console.DenyCLISession{Auth: authOf(r),
		SessionID: mux.Vars(r)["sessionId"], UserCode: body.UserCode})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewCLISession(v))
}
