package httpapi

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"phonefleet/commands/gateways"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
	"phonefleet/internal/identity"
)

// registerGatewayRoutes mounts gateway management (/v1/gateways): an
// organisation admin's signed-in session only (the commands check).
func (s *Server) registerGatewayRoutes(r *mux.Router) {
	r.Handle("/gateways/enrollment-codes", kernel.HandlerFunc(s.createGatewayEnrollmentCode)).Methods(http.MethodPost)
	r.Handle("/gateways", kernel.HandlerFunc(s.listGateways)).Methods(http.MethodGet)
	r.Handle("/gateways/{gatewayId}", kernel.HandlerFunc(s.revokeGateway)).Methods(http.MethodDelete)
}

// registerGatewaySurfaceRoutes mounts the gateway surface (/gateway/v1)
// outside /v1's authentication: enrollment takes a one-time code in its
// body, and every other route the gateway credential (Authorization:
// Bearer pfg_…), which the route's command checks. The REST envelope
// answers its errors; rate limits count it like any request.
func (s *Server) registerGatewaySurfaceRoutes(r *mux.Router) {
	r.Handle("/gateway/v1/enroll", kernel.HandlerFunc(s.enrollGateway)).Methods(http.MethodPost)
	r.Handle("/gateway/v1/releases/current", kernel.HandlerFunc(s.currentRelease)).Methods(http.MethodGet)
	r.Handle("/gateway/v1/tunnel", kernel.HandlerFunc(s.gatewayTunnel)).Methods(http.MethodGet)
}

// gatewayTunnel serves a gateway's tunnel through the gateway hub: a
// refused credential answers 401 before the upgrade.
func (s *Server) gatewayTunnel(w http.ResponseWriter, r *http.Request) error {
	if s.deps.GatewayTunnel == nil {
		return domain.Errorf(domain.CodeServiceUnavailable, "gateway tunnels are not served by this deployment")
	}
	return s.deps.GatewayTunnel(w, r)
}

type createGatewayEnrollmentCodeRequest struct {
	Name       string `json:"name"`
	TTLSeconds *int   `json:"ttlSeconds"`
}

func (s *Server) createGatewayEnrollmentCode(w http.ResponseWriter, r *http.Request) error {
	var req createGatewayEnrollmentCodeRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	cmd := gateways.CreateGatewayEnrollmentCode{Auth: authOf(r), Name: req.Name}
	if req.TTLSeconds != nil {
		if *req.TTLSeconds <= 0 {
			return domain.Errorf(domain.CodeInvalidArgument, "ttlSeconds must be between 60 and 86400").With("field", "ttlSeconds")
		}
		cmd.TTL = time.Duration(*req.TTLSeconds) * time.Second
	}
	c, err := s.app.Gateways.CreateGatewayEnrollmentCode.Handle(r.Context(), cmd)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusCreated, wire.NewGatewayEnrollmentCode(c))
}

func (s *Server) listGateways(w http.ResponseWriter, r *http.Request) error {
	vs, err := s.app.Gateways.ListGateways.Handle(r.Context(), gateways.ListGateways{Auth: authOf(r)})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewGatewayList(vs))
}

func (s *Server) revokeGateway(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.app.Gateways.RevokeGateway.Handle(r.Context(), gateways.RevokeGateway{Auth: authOf(r), GatewayID: mux.Vars(r)["gatewayId"]}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type enrollGatewayRequest struct {
	Code    string `json:"code"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

func (s *Server) enrollGateway(w http.ResponseWriter, r *http.Request) error {
	var req enrollGatewayRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	// No credential names an actor: the exchange is the enrollment
	// capability's act (the events name the code and the gateway).
	ctx := eventstore.WithActor(r.Context(), "system", "gateway-enrollment")
	g, err := s.app.Gateways.EnrollGateway.Handle(ctx, gateways.EnrollGateway{Code: req.Code, Name: req.Name, Version: req.Version})
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return kernel.WriteJSON(w, http.StatusCreated, wire.NewEnrolledGateway(g))
}

// gatewayCredential is the bearer value of a gateway surface request:
// empty when no Authorization was sent, malformed_credentials for one that
// is not a bearer value.
func gatewayCredential(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", nil
	}
	tok, err := identity.ParseBearer(h)
	if err != nil {
		return "", domain.Unauthorized(domain.ReasonMalformedCredentials, "the Authorization header is not Bearer <gateway credential>")
	}
	return tok, nil
}

func (s *Server) currentRelease(w http.ResponseWriter, r *http.Request) error {
	cred, err := gatewayCredential(r)
	if err != nil {
		return err
	}
	rel, err := s.app.Gateways.CurrentRelease.Handle(r.Context(), gateways.CurrentRelease{Credential: cred, Channel: r.URL.Query().Get("channel")})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewRelease(rel))
}
