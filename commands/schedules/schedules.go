package schedules

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/clock"
	"phonefleet/projections"
)

// Config is what the schedule capability needs.
type Config struct {
	Store *eventstore.Store
	// Now stamps the events of the schedule routes; nil means clock.Now.
	// Firings are stamped with the firing worker's clock (FireSchedule.At).
	Now func() time.Time
	// ReadModels, when not nil, gives read-your-writes on the schedules
	// read model, so a command's caller can answer from it.
	ReadModels cqrs.ReadModels
}

// Schedules is the schedule capability: the schedule routes
// (/v1/schedules) and the commands of the firing worker. Each handler
// embeds it.
type Schedules struct {
	cfg   Config
	pool  *pgxpool.Pool
	repo  *eventstore.Repository[domain.Schedule, domain.Event]
	store *eventstore.Store
}

// scheduleAggregate folds a schedule's stream: its settings and its
// firings.
var scheduleAggregate = eventstore.Aggregate[domain.Schedule, domain.Event]{
	Stream: domain.ScheduleStream,
	Codec:  domain.Events,
	New:    func(id string) domain.Schedule { return domain.Schedule{ID: id} },
	Apply: func(s *domain.Schedule, e domain.Event, at eventstore.Recorded) {
		s.Apply(e, at.Version)
	},
	OrgID: func(s *domain.Schedule) string { return s.OrgID },
}

// New returns the schedule capability.
func New(cfg Config) *Schedules {
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	return &Schedules{cfg: cfg, pool: cfg.Store.Pool(), store: cfg.Store,
		repo: eventstore.NewRepository(cfg.Store, scheduleAggregate)}
}

func (s *Schedules) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Microsecond) }

func (s *Schedules) wait(ctx context.Context, c eventstore.Committed) error {
	return cqrs.Await(ctx, s.cfg.ReadModels, c.Last(), projections.SchedulesName)
}

// decide runs fn on schedule id's state through the repository and waits
// for the read model to apply what it appended.
func (s *Schedules) decide(ctx context.Context, id string, fn func(*domain.Schedule) ([]domain.Event, error)) (domain.Schedule, error) {
	st, c, err := s.repo.Update(ctx, id, fn)
	if err != nil {
		return st, err
	}
	return st, s.wait(ctx, c)
}

// view reads schedule id as its caller sees it after a write.
func (s *Schedules) view(ctx context.Context, a domain.Auth, id string) (projections.ScheduleView, error) {
	v, ok, err := projections.GetSchedule(ctx, s.pool, a.OrgID, id)
	if err != nil {
		return v, err
	}
	if !ok || (v.DeviceID != "" && !a.CanSeeDevice(v.DeviceID)) {
		return projections.ScheduleView{}, domain.ErrScheduleNotFound(id)
	}
	return v, nil
}

// checkDevice refuses a device the caller cannot see (or that does not
// exist) with invalid_argument naming deviceId: a schedule names a device
// its creator may use.
func (s *Schedules) checkDevice(ctx context.Context, a domain.Auth, deviceID string) error {
	if deviceID == "" {
		return nil
	}
	refuse := domain.Errorf(domain.CodeInvalidArgument, "no device %s is available to this credential", deviceID).With("field", "deviceId")
	if !a.CanSeeDevice(deviceID) {
		return refuse
	}
	_, err := projections.GetDevice(ctx, s.pool, a.OrgID, deviceID, s.now())
	if errors.Is(err, projections.ErrNoRow) {
		return refuse
	}
	return err
}

// The schedule queries.

// ListSchedules pages through the organisation's schedules, oldest first
// (GET /v1/schedules).
type ListSchedules struct {
	Auth domain.Auth
	projections.ScheduleQuery
}

// GetSchedule reads one schedule (GET /v1/schedules/{scheduleId}).
type GetSchedule struct {
	Auth       domain.Auth
	ScheduleID string
}

// ListScheduleFirings pages through what a schedule's firings did, newest
// first (GET /v1/schedules/{scheduleId}/firings).
type ListScheduleFirings struct {
	Auth       domain.Auth
	ScheduleID string
	projections.FiringQuery
}

// ListSchedulesHandler handles ListSchedules.
type ListSchedulesHandler struct{ *Schedules }

// Handle answers ListSchedules. It needs runs:start and
// devices:act; schedules on devices outside the credential's subset are
// left out.
func (s ListSchedulesHandler) Handle(ctx context.Context, q ListSchedules) (projections.SchedulePage, error) {
	if err := q.Auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return projections.SchedulePage{}, err
	}
	if q.Limit < 0 {
		return projections.SchedulePage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be positive")
	}
	return projections.ListSchedules(ctx, s.pool, q.Auth.OrgID, q.Auth.Devices, q.ScheduleQuery)
}

// GetScheduleHandler handles GetSchedule.
type GetScheduleHandler struct{ *Schedules }

// Handle answers GetSchedule: not_found for a schedule that is not
// the caller's, exactly as for one that does not exist.
func (s GetScheduleHandler) Handle(ctx context.Context, q GetSchedule) (projections.ScheduleView, error) {
	if err := q.Auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return projections.ScheduleView{}, err
	}
	return s.view(ctx, q.Auth, q.ScheduleID)
}

// ListScheduleFiringsHandler handles ListScheduleFirings.
type ListScheduleFiringsHandler struct{ *Schedules }

// Handle answers ListScheduleFirings: not_found as GetSchedule.
func (s ListScheduleFiringsHandler) Handle(ctx context.Context, q ListScheduleFirings) (projections.FiringPage, error) {
	if err := q.Auth.Require(domain.ScopeRunsStart, domain.ScopeDevicesAct); err != nil {
		return projections.FiringPage{}, err
	}
	if q.Limit < 0 {
		return projections.FiringPage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be positive")
	}
	if _, err := s.view(ctx, q.Auth, q.ScheduleID); err != nil {
		return projections.FiringPage{}, err
	}
	return projections.ListScheduleFirings(ctx, s.pool, q.ScheduleID, q.FiringQuery)
}

// Handlers are the schedule capability's entry points of the
// application object: /v1/schedules and the firing worker's.
type Handlers struct {
	CreateSchedule cqrs.Handler[CreateSchedule, projections.ScheduleView]
	UpdateSchedule cqrs.Handler[UpdateSchedule, projections.ScheduleView]
	DeleteSchedule cqrs.Handler[DeleteSchedule, cqrs.Done]
	// The firing worker's: record a firing's intent, its outcome, or settle
	// one whose instance stopped.
	FireSchedule           cqrs.Handler[FireSchedule, ScheduleFiring]
	CompleteScheduleFiring cqrs.Handler[CompleteScheduleFiring, bool]
	ResolveScheduleFiring  cqrs.Handler[ResolveScheduleFiring, string]

	ListSchedules       cqrs.Handler[ListSchedules, projections.SchedulePage]
	GetSchedule         cqrs.Handler[GetSchedule, projections.ScheduleView]
	ListScheduleFirings cqrs.Handler[ListScheduleFirings, projections.FiringPage]
}

// Handlers returns the schedule capability's entry points, each behind d.
func (s *Schedules) Handlers(d cqrs.Decorator) Handlers {
	return Handlers{
		CreateSchedule:         cqrs.Serve(d, CreateScheduleHandler{s}),
		UpdateSchedule:         cqrs.Serve(d, UpdateScheduleHandler{s}),
		DeleteSchedule:         cqrs.Serve(d, DeleteScheduleHandler{s}),
		FireSchedule:           cqrs.Serve(d, FireScheduleHandler{s}),
		CompleteScheduleFiring: cqrs.Serve(d, CompleteScheduleFiringHandler{s}),
		ResolveScheduleFiring:  cqrs.Serve(d, ResolveScheduleFiringHandler{s}),
		ListSchedules:          cqrs.Serve(d, ListSchedulesHandler{s}),
		GetSchedule:            cqrs.Serve(d, GetScheduleHandler{s}),
		ListScheduleFirings:    cqrs.Serve(d, ListScheduleFiringsHandler{s}),
	}
}
