package domain

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // schedules name IANA zones; do not depend on the host's zoneinfo
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
)

// Identifier prefixes of schedules and their firings.
const (
	PrefixSchedule = "sch"
	PrefixFiring   = "fir"
)

// Bounds of a schedule's settings.
const (
	MaxScheduleNameRunes = 200
	MaxScheduleCronRunes = 200
	// MaxScheduleScriptBytes bounds the script a schedule keeps for its
	// runs (it is recorded on every schedule event that carries settings).
	MaxScheduleScriptBytes = 256 << 10
	// DefaultScheduleTimezone is the zone of a schedule that names none.
	DefaultScheduleTimezone = "UTC"
)

// ScheduleStream returns the stream of a schedule's settings and firings.
func ScheduleStream(scheduleID string) string { return "schedule-" + scheduleID }

// firingNamespace is the UUID namespace firing ids are derived in.
var firingNamespace = uuid.MustParse("6f1d8a52-3b9e-4c1a-9f57-2d8e0c4b7a11")

// ScheduleFiringID is the id of the firing of scheduleID for the
// occurrence scheduledFor: the same on every instance and every retry, so
// that a firing is recognised as the same one wherever it is seen.
func ScheduleFiringID(scheduleID string, scheduledFor time.Time) string {
	u := uuid.NewSHA1(firingNamespace, []byte(scheduleID+"|"+scheduledFor.UTC().Format(time.RFC3339Nano)))
	return PrefixFiring + "_" + strings.ReplaceAll(u.String(), "-", "")
}

// cronParser reads standard five-field expressions (minute, hour, day of
// month, month, day of week) and the descriptors (@hourly, @daily, …).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron is a parsed cron expression read in its time zone.
type Cron struct {
	spec *cron.SpecSchedule
}

// ParseCron parses a standard five-field cron expression (or a descriptor
// such as @daily) in timezone (an IANA name; empty means UTC). A refusal
// is invalid_argument naming the field (cron or timezone) and the problem.
func ParseCron(expr, timezone string) (Cron, error) {
	if timezone == "" {
		timezone = DefaultScheduleTimezone
	}
	if timezone == "Local" {
		return Cron{}, Errorf(CodeInvalidArgument, "invalid timezone %q: name an IANA time zone such as Europe/Paris or UTC", timezone).
			With("field", "timezone")
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil {
		return Cron{}, Errorf(CodeInvalidArgument, "invalid timezone %q: name an IANA time zone such as Europe/Paris or UTC", timezone).
			With("field", "timezone")
	}
	expr = strings.TrimSpace(expr)
	bad := func(why string) error {
		return Errorf(CodeInvalidArgument, "invalid cron expression %q: %s", expr, why).With("field", "cron")
	}
	switch {
	case expr == "":
		return Cron{}, bad("it is empty")
	case utf8.RuneCountInString(expr) > MaxScheduleCronRunes:
		return Cron{}, bad("it is too long")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return Cron{}, bad("give the time zone in the timezone field, not in the expression")
	case strings.HasPrefix(expr, "@every"):
		return Cron{}, bad("@every is an interval, not a cron expression; write it as five fields (e.g. */15 * * * *)")
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return Cron{}, bad(err.Error())
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return Cron{}, bad("not a calendar schedule")
	}
	spec.Location = loc
	c := Cron{spec: spec}
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Cron{}, bad("it never fires (no such date)")
	}
	return c, nil
}

// Next returns the first occurrence strictly after t (in UTC), or the zero
// time when there is none within five years.
func (c Cron) Next(t time.Time) time.Time {
	n := c.spec.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Latest returns the latest occurrence in (after, now], the zero time when
// there is none, and whether an earlier occurrence in that interval was
// due too (it is skipped: after an outage a schedule catches up once, for
// its latest occurrence). It costs a handful of steps however long the
// interval: it starts counting near now, not at after.
func (c Cron) Latest(after, now time.Time) (latest time.Time, skipped bool) {
	first := c.Next(after)
	if first.IsZero() || first.After(now) {
		return time.Time{}, false
	}
	from := first
	for _, back := range []time.Duration{time.Hour, 24 * time.Hour, 8 * 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		start := now.Add(-back)
		if !start.After(from) {
			break
		}
		if n := c.Next(start); !n.IsZero() && !n.After(now) {
			from = n
			break
		}
	}
	for {
		n := c.Next(from)
		if n.IsZero() || n.After(now) {
			return from, from.After(first)
		}
		from = n
	}
}

// Normalize fills a schedule's defaults (timezone UTC, executor builtin)
// and checks its settings: a refusal is invalid_argument naming the field.
// The device, if named, is the command's to check (it must be one the
// creator can see); the script's steps are checked when a run starts.
func (s *ScheduleSettings) Normalize() error {
	if s.Timezone == "" {
		s.Timezone = DefaultScheduleTimezone
	}
	if s.Executor == "" {
		s.Executor = ExecutorBuiltin
	}
	field := func(name, format string, args ...any) error {
		return Errorf(CodeInvalidArgument, format, args...).With("field", name)
	}
	switch {
	case strings.TrimSpace(s.Name) == "":
		return field("name", "name is required")
	case !utf8.ValidString(s.Name) || utf8.RuneCountInString(s.Name) > MaxScheduleNameRunes:
		return field("name", "name must be valid text of at most %d characters", MaxScheduleNameRunes)
	}
	if _, err := ParseCron(s.Cron, s.Timezone); err != nil {
		return err
	}
	if err := CheckRunGoal(s.Goal); err != nil {
		return AsError(err).With("field", "goal")
	}
	switch s.Executor {
	case ExecutorBuiltin:
	case ExecutorExternal:
		return field("executor", "a schedule's runs use the builtin executor: an external run's vrxBaseUrl is shown to its starter only, and a firing has no one to show it to")
	default:
		return field("executor", "executor must be builtin")
	}
	if s.MaxSteps < 0 || s.MaxSteps > MaxRunMaxSteps {
		return field("maxSteps", "maxSteps must be between 1 and %d (0 or absent means %d)", MaxRunMaxSteps, DefaultRunMaxSteps)
	}
	if d := time.Duration(s.DeadlineSeconds) * time.Second; s.DeadlineSeconds != 0 && (d < MinRunDeadline || d > MaxRunDeadline) {
		return field("deadlineSeconds", "deadlineSeconds must be between %d and %d (0 or absent means %d)",
			int(MinRunDeadline.Seconds()), int(MaxRunDeadline.Seconds()), int(DefaultRunDeadline.Seconds()))
	}
	if err := s.SuccessCheck.Check(); err != nil {
		return AsError(err).With("field", "successCheck")
	}
	if len(s.Script) > 0 {
		if len(s.Script) > MaxScheduleScriptBytes {
			return field("script", "script is larger than %d bytes", MaxScheduleScriptBytes)
		}
		if !json.Valid(s.Script) || bytes.TrimSpace(s.Script)[0] != '{' {
			return field("script", "script must be a JSON object (a run's exported script)")
		}
	}
	return nil
}

// Firing is a schedule's latest firing as the aggregate keeps it.
type Firing struct {
	ID           string
	ScheduledFor time.Time
	FiredAt      time.Time
	// Outcome is empty while the firing is in flight (fired, its outcome
	// not yet recorded).
	Outcome string
	// Version is the stream version of its ScheduleFired.
	Version int64
}

// Pending reports whether the firing's outcome is not on record yet.
func (f *Firing) Pending() bool { return f != nil && f.Outcome == "" }

// Schedule is the aggregate of one schedule's stream. Its command methods
// decide and return events; Apply is the only place its state changes.
type Schedule struct {
	ID    string
	OrgID string
	ScheduleSettings
	CreatedBy ScheduleCreator
	CreatedAt time.Time
	UpdatedAt time.Time
	Deleted   bool
	// Since is where occurrences count from: the creation, the last change
	// of cron or timezone, the last switch on, or the last occurrence
	// fired, whichever is latest.
	Since time.Time
	// Last is the latest firing (nil before the first).
	Last *Firing
}

// Exists reports whether the schedule was created and not deleted. (ID
// may name a schedule that does not exist: the id a command was asked
// about.)
func (s *Schedule) Exists() bool { return !s.CreatedAt.IsZero() && !s.Deleted }

// Apply changes the schedule's state by one recorded event of its stream,
// recorded at stream version version. The organisation is the one
// schedule.created names.
func (s *Schedule) Apply(e Event, version int64) {
	switch e := e.(type) {
	case ScheduleCreated:
		s.ID, s.OrgID, s.ScheduleSettings = e.ScheduleID, e.OrgID, e.ScheduleSettings
		s.CreatedBy, s.CreatedAt, s.UpdatedAt, s.Since = e.CreatedBy, e.CreatedAt, e.CreatedAt, e.CreatedAt
	case ScheduleUpdated:
		s.ScheduleSettings, s.UpdatedAt, s.Since = e.ScheduleSettings, e.At, e.CountFrom
	case ScheduleDeleted:
		s.Deleted, s.UpdatedAt = true, e.At
	case ScheduleFired:
		s.Last = &Firing{ID: e.FiringID, ScheduledFor: e.ScheduledFor, FiredAt: e.FiredAt, Version: version}
		if e.ScheduledFor.After(s.Since) {
			s.Since = e.ScheduledFor
		}
	case ScheduleFiringCompleted:
		if s.Last != nil && s.Last.ID == e.FiringID {
			s.Last.Outcome = e.Outcome
		}
	}
}

// RestartsCount reports whether changing a schedule from before to after
// makes its occurrences count afresh from the change: a new cron
// expression or timezone, or switching it on. Occurrences that fell while
// it was off, or under its old expression, are not caught up.
func RestartsCount(before, after ScheduleSettings) bool {
	return before.Cron != after.Cron || before.Timezone != after.Timezone || (after.Enabled && !before.Enabled)
}

// VisibleTo reports whether a may see and change the schedule: one of its
// organisation, whose device subset admits the schedule's device.
func (s *Schedule) VisibleTo(a Auth) bool {
	return s.Exists() && a.OrgID == s.OrgID && (s.DeviceID == "" || a.CanSeeDevice(s.DeviceID))
}

// ErrScheduleNotFound is the one answer for a schedule that does not
// exist, was deleted, or is not the caller's to see: the three are
// indistinguishable.
func ErrScheduleNotFound(id string) *Error {
	return Errorf(CodeNotFound, "no schedule %s", id)
}

// CreatorOf records a as a schedule's creator.
func CreatorOf(a Auth) ScheduleCreator {
	return ScheduleCreator{Kind: a.Kind, UserID: a.UserID, APIKeyID: a.APIKeyID, ClientID: a.ClientID, Role: a.Role,
		Scopes: slices.Clone(a.Scopes), Devices: slices.Clone(a.Devices), Instance: a.Instance}
}

// Auth rebuilds the authorization context the schedule's runs start
// with: its creator's, in its organisation.
func (s *Schedule) Auth() Auth {
	c := s.CreatedBy
	return Auth{OrgID: s.OrgID, Kind: c.Kind, UserID: c.UserID, APIKeyID: c.APIKeyID, ClientID: c.ClientID, Role: c.Role,
		Scopes: slices.Clone(c.Scopes), Devices: slices.Clone(c.Devices), Instance: c.Instance}
}

// Create decides a new schedule id of a's organisation with settings set
// (normalised and checked). a must hold runs:start and devices:act: every
// firing starts a run as a.
func (s *Schedule) Create(a Auth, id string, set ScheduleSettings, now time.Time) ([]Event, error) {
	if err := a.Require(ScopeRunsStart, ScopeDevicesAct); err != nil {
		return nil, err
	}
	if !s.CreatedAt.IsZero() {
		return nil, Errorf(CodeInternal, "schedule %s exists already", id)
	}
	if err := set.Normalize(); err != nil {
		return nil, err
	}
	return []Event{ScheduleCreated{ScheduleID: id, OrgID: a.OrgID, ScheduleSettings: set, CreatedBy: CreatorOf(a), CreatedAt: now}}, nil
}

// Update decides new settings for the schedule. Settings equal to the
// current ones record nothing.
func (s *Schedule) Update(a Auth, set ScheduleSettings, now time.Time) ([]Event, error) {
	if err := a.Require(ScopeRunsStart, ScopeDevicesAct); err != nil {
		return nil, err
	}
	if !s.VisibleTo(a) {
		return nil, ErrScheduleNotFound(s.ID)
	}
	if err := set.Normalize(); err != nil {
		return nil, err
	}
	if sameSettings(s.ScheduleSettings, set) {
		return nil, nil
	}
	from := s.Since
	if RestartsCount(s.ScheduleSettings, set) && now.After(from) {
		from = now
	}
	return []Event{ScheduleUpdated{ScheduleID: s.ID, ScheduleSettings: set, CountFrom: from, By: ActorOf(a), At: now}}, nil
}

func sameSettings(a, b ScheduleSettings) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// Delete decides removing the schedule: it fires no more. A firing in
// flight still records its outcome.
func (s *Schedule) Delete(a Auth, now time.Time) ([]Event, error) {
	if err := a.Require(ScopeRunsStart, ScopeDevicesAct); err != nil {
		return nil, err
	}
	if !s.VisibleTo(a) {
		return nil, ErrScheduleNotFound(s.ID)
	}
	return []Event{ScheduleDeleted{ScheduleID: s.ID, By: ActorOf(a), At: now}}, nil
}

// NextAt returns the next occurrence the schedule will fire for (it may
// be in the past: due now), or the zero time when it will not fire (off,
// deleted, an expression without a next date).
func (s *Schedule) NextAt() time.Time {
	if !s.Exists() || !s.Enabled {
		return time.Time{}
	}
	c, err := ParseCron(s.Cron, s.Timezone)
	if err != nil {
		return time.Time{}
	}
	return c.Next(s.Since)
}

// Fire decides the firing due at now, if any: the latest occurrence since
// the last one fired (earlier ones missed during an outage are skipped,
// and the event says so). Nothing is due while the previous firing's
// outcome is not on record, or when the schedule is off or deleted.
func (s *Schedule) Fire(now time.Time, worker string) ([]Event, error) {
	if !s.Exists() || !s.Enabled || s.Last.Pending() {
		return nil, nil
	}
	c, err := ParseCron(s.Cron, s.Timezone)
	if err != nil {
		return nil, nil // recorded settings were checked; an expression that no longer parses never fires
	}
	at, skipped := c.Latest(s.Since, now)
	if at.IsZero() {
		return nil, nil
	}
	return []Event{ScheduleFired{ScheduleID: s.ID, FiringID: ScheduleFiringID(s.ID, at), ScheduledFor: at, FiredAt: now,
		Skipped: skipped, Next: c.Next(at), Worker: worker}}, nil
}

// Complete decides recording what the firing firingID came to. It records
// once: a firing whose outcome is on record records nothing more, except
// that a run started after all supersedes FiringAbandoned.
func (s *Schedule) Complete(c ScheduleFiringCompleted) ([]Event, error) {
	if s.Last == nil || s.Last.ID != c.FiringID {
		return nil, Errorf(CodeInternal, "schedule %s has no firing %s in flight", s.ID, c.FiringID)
	}
	switch {
	case s.Last.Pending():
	case s.Last.Outcome == FiringAbandoned && c.Outcome == FiringStarted:
	default:
		return nil, nil
	}
	c.ScheduleID, c.ScheduledFor, c.Name = s.ID, s.Last.ScheduledFor, s.Name
	return []Event{c}, nil
}
