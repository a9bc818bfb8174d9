package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"

	"phonefleet/commands/apps"
	"phonefleet/domain"
	"phonefleet/http/kernel"
	"phonefleet/http/wire"
)

// registerAppRoutes mounts the app store (/v1/app-store) and the app
// library (/v1/app-library). Reading needs apps:read, installing and
// refreshing apps:write with it (the handlers check).
func (s *Server) registerAppRoutes(r *mux.Router) {
	r.Handle("/app-store/catalog", kernel.HandlerFunc(s.getAppCatalog)).Methods(http.MethodGet)
	r.Handle("/app-store/installations", kernel.HandlerFunc(s.createInstallation)).Methods(http.MethodPost)
	r.Handle("/app-store/installations", kernel.HandlerFunc(s.listInstallations)).Methods(http.MethodGet)
	r.Handle("/app-store/installations/by-request/{requestKey}", kernel.HandlerFunc(s.getInstallationByRequest)).Methods(http.MethodGet)
	r.Handle("/app-store/installations/{installationId}", kernel.HandlerFunc(s.getInstallation)).Methods(http.MethodGet)
	r.Handle("/app-library/device-capabilities", kernel.HandlerFunc(s.getDeviceCapabilities)).Methods(http.MethodGet)
	r.Handle("/app-library/inventory", kernel.HandlerFunc(s.getInventory)).Methods(http.MethodGet)
	r.Handle("/app-library/inventory/refreshes", kernel.HandlerFunc(s.createInventoryRefresh)).Methods(http.MethodPost)
	r.Handle("/app-library/requests/{requestKey}", kernel.HandlerFunc(s.getAppRequest)).Methods(http.MethodGet)
}

func (s *Server) getAppCatalog(w http.ResponseWriter, r *http.Request) error {
	c, err := s.app.Apps.GetCatalog.Handle(r.Context(), apps.GetCatalog{Auth: authOf(r)})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewAppCatalog(c))
}

type createInstallationRequest struct {
	RequestKey string   `json:"requestKey"`
	Package    string   `json:"package"`
	Version    string   `json:"version"`
	Devices    []string `json:"devices"`
}

// createInstallation answers 202 with the installation, every device
// queued; a retry with the same requestKey answers the same installation
// with 200.
func (s *Server) createInstallation(w http.ResponseWriter, r *http.Request) error {
	var req createInstallationRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	v, err := s.app.Apps.RequestInstallation.Handle(r.Context(), apps.RequestInstallation{Auth: authOf(r), RequestKey: req.RequestKey,
		Package: req.Package, Version: req.Version, Devices: req.Devices})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, acceptedOrReplayed(v), wire.NewAppRequest(v))
}

func acceptedOrReplayed(v apps.RequestView) int {
	if v.Replayed {
		return http.StatusOK
	}
	return http.StatusAccepted
}

// maxInstallationLimit is the largest page of installations.
const maxInstallationLimit = 100

func (s *Server) listInstallations(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := pageLimit(q, maxInstallationLimit)
	if err != nil {
		return err
	}
	before, err := idCursor(q, "before", "nextBefore", domain.PrefixInstallation)
	if err != nil {
		return err
	}
	p, err := s.app.Apps.ListInstallations.Handle(r.Context(), apps.ListInstallations{Auth: authOf(r), Before: before, Limit: limit})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewAppInstallationPage(p))
}

func (s *Server) getInstallation(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Apps.GetInstallation.Handle(r.Context(), apps.GetInstallation{Auth: authOf(r), InstallationID: mux.Vars(r)["installationId"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewAppRequest(v))
}

func (s *Server) getInstallationByRequest(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Apps.GetInstallation.Handle(r.Context(), apps.GetInstallation{Auth: authOf(r), RequestKey: mux.Vars(r)["requestKey"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewAppRequest(v))
}

func (s *Server) getDeviceCapabilities(w http.ResponseWriter, r *http.Request) error {
	list, err := s.app.Apps.GetCapabilities.Handle(r.Context(), apps.GetCapabilities{Auth: authOf(r)})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewAppCapabilities(list))
}

func (s *Server) getInventory(w http.ResponseWriter, r *http.Request) error {
	list, err := s.app.Apps.GetInventory.Handle(r.Context(), apps.GetInventory{Auth: authOf(r), DeviceID: r.URL.Query().Get("deviceId")})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewAppInventory(list))
}

type createRefreshRequest struct {
	RequestKey string   `json:"requestKey"`
	Devices    []string `json:"devices"`
}

func (s *Server) createInventoryRefresh(w http.ResponseWriter, r *http.Request) error {
	var req createRefreshRequest
	if err := kernel.DecodeJSON(r, &req); err != nil {
		return err
	}
	v, err := s.app.Apps.RequestRefresh.Handle(r.Context(), apps.RequestRefresh{Auth: authOf(r), RequestKey: req.RequestKey, Devices: req.Devices})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, acceptedOrReplayed(v), wire.NewAppRequest(v))
}

func (s *Server) getAppRequest(w http.ResponseWriter, r *http.Request) error {
	v, err := s.app.Apps.GetRequest.Handle(r.Context(), apps.GetRequest{Auth: authOf(r), RequestKey: mux.Vars(r)["requestKey"]})
	if err != nil {
		return err
	}
	return kernel.WriteJSON(w, http.StatusOK, wire.NewAppRequest(v))
}
