// Package apps is the app store and the app library (spec 1 item 8, 4.5):
// the deployment's catalog of managed apps, installations of a catalog
// version on the organisation's devices (tracked per device, keyed by
// the caller's requestKey), and what each device runs (capabilities and
// inventory, re-read on request).
//
// Device work goes through the fleet (Devices, which *fleet.Fleet
// satisfies): an installation takes each device's lease as its requester,
// installs through an install_app action carrying the catalog's APK (so
// it leaves a receipt, and the APK is checked against its SHA-256 before
// anything is sent), gives the lease back and re-reads the device.
package apps

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// Devices is what the app store uses of the fleet, which *fleet.Fleet
// satisfies: a device the caller may see, its lease, an action on it and
// its software.
type Devices interface {
	Visible(ctx context.Context, auth domain.Auth, deviceID string) (domain.Device, error)
	Lease(ctx context.Context, cmd fleet.AcquireLease) (projections.LeaseView, error)
	Release(ctx context.Context, cmd fleet.ReleaseLease) error
	Act(ctx context.Context, cmd fleet.PerformAction) (fleet.ActOutcome, error)
	Software(ctx context.Context, q fleet.ReadSoftware) (domain.DeviceSoftware, error)
}

// Config is what the capability is built from.
type Config struct {
	Store *eventstore.Store
	// Catalog is the deployment's catalog; nil means the embedded default.
	Catalog *domain.AppCatalog
	// CatalogDir is where relative APK locations are read from (the
	// catalog file's directory).
	CatalogDir string
	Devices    Devices
	ReadModels cqrs.ReadModels
	// Now is the clock; nil means clock.Now.
	Now func() time.Time
}

// Apps is the app store and library capability.
type Apps struct {
	cfg  Config
	pool *pgxpool.Pool
	repo *eventstore.Repository[*domain.AppRequest, domain.Event]
}

// New builds the capability.
func New(cfg Config) *Apps {
	if cfg.Catalog == nil {
		cfg.Catalog = domain.DefaultAppCatalog()
	}
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	repo := eventstore.NewRepository(cfg.Store, requestAggregate)
	repo.Now = cfg.Now
	return &Apps{cfg: cfg, pool: cfg.Store.Pool(), repo: repo}
}

// LoadCatalog reads the catalog file at path; "" is the embedded default.
// It returns the catalog and the directory relative APK locations are
// read from.
func LoadCatalog(path string) (*domain.AppCatalog, string, error) {
	if path == "" {
		return domain.DefaultAppCatalog(), "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("app catalog: %w", err)
	}
	c, err := domain.ParseAppCatalog(b)
	if err != nil {
		return nil, "", err
	}
	return c, filepath.Dir(path), nil
}

// requestAggregate folds a tracked request; its id is its stream's name
// (domain.AppRequestStream).
var requestAggregate = eventstore.Aggregate[*domain.AppRequest, domain.Event]{
	Stream: func(id string) string { return id },
	Codec:  domain.Events,
	New:    func(string) *domain.AppRequest { return domain.NewAppRequest() },
	Apply:  func(s **domain.AppRequest, e domain.Event, _ eventstore.Recorded) { (*s).Apply(e) },
	OrgID:  func(s **domain.AppRequest) string { return (*s).OrgID },
}

// Handlers are the capability's entry points of the application object.
type Handlers struct {
	GetCatalog          cqrs.Handler[GetCatalog, Catalog]
	RequestInstallation cqrs.Handler[RequestInstallation, RequestView]
	ListInstallations   cqrs.Handler[ListInstallations, InstallationPage]
	GetInstallation     cqrs.Handler[GetInstallation, RequestView]
	GetRequest          cqrs.Handler[GetRequest, RequestView]
	RequestRefresh      cqrs.Handler[RequestRefresh, RequestView]
	GetCapabilities     cqrs.Handler[GetCapabilities, []DeviceCapabilities]
	GetInventory        cqrs.Handler[GetInventory, []DeviceInventory]
	// RunDeviceWork is sent by the app store's worker for each device
	// a request still owes.
	RunDeviceWork cqrs.Handler[RunDeviceWork, string]
}

// Handlers returns the entry points, each behind d.
func (a *Apps) Handlers(d cqrs.Decorator) Handlers {
	return Handlers{
		GetCatalog:          cqrs.Serve(d, GetCatalogHandler{a}),
		RequestInstallation: cqrs.Serve(d, RequestInstallationHandler{a}),
		ListInstallations:   cqrs.Serve(d, ListInstallationsHandler{a}),
		GetInstallation:     cqrs.Serve(d, GetInstallationHandler{a}),
		GetRequest:          cqrs.Serve(d, GetRequestHandler{a}),
		RequestRefresh:      cqrs.Serve(d, RequestRefreshHandler{a}),
		GetCapabilities:     cqrs.Serve(d, GetCapabilitiesHandler{a}),
		GetInventory:        cqrs.Serve(d, GetInventoryHandler{a}),
		RunDeviceWork:       cqrs.Serve(d, RunDeviceWorkHandler{a}),
	}
}

// require checks the caller for the app store: a person's session or a key
// (an OAuth app is sent to the console, spec 5.2) holding scopes.
func require(auth domain.Auth, scopes ...domain.Scope) error {
	if err := auth.DenyApp("managing apps", "the console's Apps page"); err != nil {
		return err
	}
	return auth.Require(scopes...)
}

// openAPK reads a catalog version's file from its location. It does not
// check the hash: the fleet does, right before the file would be sent.
func (a *Apps) openAPK(v domain.CatalogVersion) ([]byte, error) {
	if name, ok := strings.CutPrefix(v.APK, "embedded:"); ok {
		return fs.ReadFile(domain.EmbeddedAPKs, "catalogdata/"+name)
	}
	p := v.APK
	if !filepath.IsAbs(p) {
		p = filepath.Join(a.cfg.CatalogDir, p)
	}
	return os.ReadFile(p)
}

// wait gives read-your-writes on the apps read model.
func (a *Apps) wait(ctx context.Context, c eventstore.Committed) error {
	if len(c.Appends) == 0 {
		return nil
	}
	return cqrs.Await(ctx, a.cfg.ReadModels, c.Last(), projections.AppsName)
}

// visibleDevices lists the devices of the caller's organisation it may
// see, in id order.
func (a *Apps) visibleDevices(ctx context.Context, auth domain.Auth) ([]deviceRow, error) {
	rows, err := a.pool.Query(ctx, `SELECT device_id, name, backend, status FROM public.devices WHERE org_id = $1 ORDER BY device_id`, auth.OrgID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []deviceRow
	for rows.Next() {
		var d deviceRow
		if err := rows.Scan(&d.ID, &d.Name, &d.Backend, &d.Status); err != nil {
			return nil, err
		}
		if auth.CanSeeDevice(d.ID) {
			out = append(out, d)
		}
	}
	return out, rows.Err()
}

type deviceRow struct {
	ID, Name, Backend, Status string
}

// requestKeyPattern is what a requestKey may hold: it is a path segment
// of the routes that read a request back, so only characters that need
// no escaping there.
var requestKeyPattern = regexp.MustCompile(`^[A-Za-z0-9._~:-]{1,255}$`)

// checkRequestKey refuses a key that is empty, longer than 255 characters
// or holds other characters than letters, digits and . _ ~ : -.
func checkRequestKey(key string) error {
	if !requestKeyPattern.MatchString(key) {
		return domain.Errorf(domain.CodeInvalidArgument, "requestKey is required: 1 to 255 letters, digits and . _ ~ : -, "+
			"new for each request and reused only to retry it").With("field", "requestKey")
	}
	return nil
}

// checkDevices refuses an empty, long or repeated list and any device the
// caller cannot see (answered as a missing one).
func (a *Apps) checkDevices(ctx context.Context, auth domain.Auth, ids []string) error {
	if len(ids) == 0 || len(ids) > MaxDevicesPerRequest {
		return domain.Errorf(domain.CodeInvalidArgument, "devices must list 1 to %d device ids", MaxDevicesPerRequest).With("field", "devices")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return domain.Errorf(domain.CodeInvalidArgument, "device %s is listed twice", id).With("field", "devices")
		}
		seen[id] = true
		if _, err := a.cfg.Devices.Visible(ctx, auth, id); err != nil {
			return err
		}
	}
	return nil
}

// MaxDevicesPerRequest bounds the devices of one installation or refresh.
const MaxDevicesPerRequest = 50
