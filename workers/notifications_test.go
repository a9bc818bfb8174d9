package workers_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/commands"
	"phonefleet/commands/notifications"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/smtpmail"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/testutil/smtptest"
	"phonefleet/workers"
)

// notifyEnv is a database with the notifications read model running, the
// notifications capability over it and an admin with an e-mail address.
type notifyEnv struct {
	pool   *pgxpool.Pool
	url    string
	store  *eventstore.Store
	runner *projections.Runner
	clock  *testutil.Clock
	// names are the read models running.
	names []string
	app   notifications.Handlers
	org   string
	admin string
}

func newNotifyEnv(t *testing.T, also ...projections.Projection) *notifyEnv {
	t.Helper()
	url := testutil.DatabaseURL(t)
	pool := smallPool(t, url, 6)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner := runReadModels(t, store, append([]projections.Projection{projections.Notifications{}}, also...)...)
	names := []string{projections.NotificationsName}
	for _, p := range also {
		names = append(names, p.Name())
	}
	e := &notifyEnv{pool: pool, url: url, store: store, runner: runner, clock: newClock(), names: names,
		org: domain.NewID(domain.PrefixOrganisation), admin: "user_" + domain.NewID("x")[2:10]}
	e.app = notifyApp(pool, store, runner, e.clock.Now)
	_, err := e.app.SetNotificationPreferences.Handle(testutil.Context(t), notifications.SetNotificationPreferences{
		Auth:   domain.Auth{OrgID: e.org, Kind: domain.PrincipalConsole, UserID: e.admin, Role: domain.RoleAdmin},
		Change: domain.NotificationPreferencesChange{Email: ptr(e.admin + "@example.com")}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ptr[T any](v T) *T { return &v }

// runReadModels makes and runs the read models projs over store until the
// test ends.
func runReadModels(t *testing.T, store *eventstore.Store, projs ...projections.Projection) *projections.Runner {
	t.Helper()
	runner, err := projections.NewRunner(store, quiet, projs, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { _ = runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return runner
}

func notifyApp(pool *pgxpool.Pool, store *eventstore.Store, rm *projections.Runner, now func() time.Time) notifications.Handlers {
	c := &notifications.Capability{Store: store, Queries: projections.NotificationQueries{DB: pool}, Now: now, EmailOffered: true}
	if rm != nil {
		c.ReadModels = testutil.ReadModels{RM: rm}
	}
	return commands.NewApplication(commands.Capabilities{Notifications: c}).Notifications
}

func (e *notifyEnv) workers(mail *smtptest.Server, id string) *workers.Notifications {
	return workers.NewNotifications(workers.NotificationsConfig{Pool: e.pool, App: e.app, ID: id, Now: e.clock.Now,
		Mail: &smtpmail.Config{Addr: mail.Addr, From: "phonefleet@notify.test", TLS: "none"}, Logger: quiet})
}

// catchUp waits until the read model has applied everything appended.
func (e *notifyEnv) catchUp(t *testing.T) {
	t.Helper()
	last, err := e.store.Last(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testutil.Context(t), 20*time.Second)
	defer cancel()
	for _, n := range e.names {
		if err := e.runner.WaitFor(ctx, n, last); err != nil {
			t.Fatal(err)
		}
	}
}

// raise records a refused payment follow-up in the organisation and runs
// the fan-out: the admin gets one notification to e-mail, whose id it returns.
func (e *notifyEnv) raise(t *testing.T, w *workers.Notifications) string {
	t.Helper()
	id := "pfu_" + domain.NewID("x")[2:]
	ev := domain.PaymentFollowupAttempted{PaymentFollowup: domain.PaymentFollowup{FollowupID: id, FulfilmentID: domain.NewID(domain.PrefixFulfilment),
		Action: domain.FollowupCancelSubscription, SubscriptionID: "sub_1"}, Attempt: 9, Outcome: domain.FollowupGaveUp,
		Error: "provider unavailable", At: e.clock.Now()}
	news, err := eventstore.Encode(domain.Events, e.org, domain.Event(ev))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Append(testutil.Context(t), domain.PaymentFollowupStream(id), eventstore.NoStream, news...); err != nil {
		t.Fatal(err)
	}
	e.catchUp(t)
	raised, err := w.FanoutOnce(testutil.Context(t))
	if err != nil || len(raised) != 1 || len(raised[0].Recipients) != 1 || raised[0].Recipients[0].Email != e.admin+"@example.com" {
		t.Fatalf("fan-out: %+v (%v); want one notification to e-mail the admin", raised, err)
	}
	e.catchUp(t)
	return raised[0].Recipients[0].NotificationID
}

func (e *notifyEnv) emailStatus(t *testing.T, id string) (status string, attempts int) {
	t.Helper()
	e.catchUp(t)
	if err := e.pool.QueryRow(testutil.Context(t), `SELECT email_status, email_attempts FROM notifications WHERE notification_id = $1`, id).
		Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	return status, attempts
}

// TestNotificationEmailRetriesThenSendsOnce: a 4xx answer is retried at
// the domain's due time, a 5xx is not, and an accepted message is sent
// once with the notification's idempotency key.
func TestNotificationEmailRetriesThenSendsOnce(t *testing.T) {
	e := newNotifyEnv(t)
	mail := smtptest.Start(t)
	refuse := 1
	mail.OnData = func(smtptest.Message) error {
		if refuse > 0 {
			refuse--
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"}
		}
		return nil
	}
	w := e.workers(mail, "one")
	id := e.raise(t, w)
	ctx := testutil.Context(t)

	got, err := w.EmailOnce(ctx)
	if err != nil || len(got) != 1 || got[0].Outcome != domain.EmailRetrying || got[0].NextAttemptAt == nil {
		t.Fatalf("first attempt: %+v (%v); want retrying", got, err)
	}
	e.catchUp(t)
	if got, _ := w.EmailOnce(ctx); len(got) != 0 {
		t.Fatalf("before the retry is due: %+v; want nothing", got)
	}
	e.clock.Advance(domain.EmailRetryGaps[0])
	got, err = w.EmailOnce(ctx)
	if err != nil || len(got) != 1 || got[0].Outcome != domain.EmailSent || got[0].Attempt != 2 {
		t.Fatalf("second attempt: %+v (%v); want sent", got, err)
	}
	if st, n := e.emailStatus(t, id); st != domain.EmailSent || n != 2 {
		t.Fatalf("got %s after %d attempts; want sent after 2", st, n)
	}
	e.clock.Advance(time.Hour)
	if got, _ := w.EmailOnce(ctx); len(got) != 0 {
		t.Fatalf("after it was sent: %+v; want nothing", got)
	}
	if marks := e.marks(t, id); marks != 2 {
		t.Fatalf("send marks before the cleanup: %d; want one per attempt that reached DATA's end", marks)
	}
	if err := workers.CleanupEmail(ctx, w, e.clock.Now()); err != nil || e.marks(t, id) != 0 {
		t.Fatalf("send marks after the cleanup: %d (%v); want none (both attempts recorded)", e.marks(t, id), err)
	}
	ms := mail.Messages()
	if len(ms) != 1 || ms[0].Header.Get("Message-Id") != "<"+id+"@phonefleet>" || ms[0].To[0] != e.admin+"@example.com" {
		t.Fatalf("the server holds %d messages: %+v", len(ms), ms)
	}

	// A 5xx is final.
	mail.OnData = func(smtptest.Message) error {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such mailbox"}
	}
	id2 := e.raise(t, w)
	got, err = w.EmailOnce(ctx)
	if err != nil || len(got) != 1 || got[0].Outcome != domain.EmailFailed || !strings.Contains(got[0].Error, "550") {
		t.Fatalf("refused: %+v (%v); want failed with the server's answer", got, err)
	}
	if st, _ := e.emailStatus(t, id2); st != projections.NotificationFailed {
		t.Fatalf("refused e-mail: got %s; want failed", st)
	}
	e.clock.Advance(24 * time.Hour)
	if got, _ := w.EmailOnce(ctx); len(got) != 0 {
		t.Fatalf("after a 5xx: %+v; want no retry", got)
	}
}

// TestNotificationEmailChildProcess is not a test on its own: the restart
// test runs the test binary again with PF_NOTIFY_CHILD_DB set, and this
// makes the due e-mail attempts until it is killed.
func TestNotificationEmailChildProcess(t *testing.T) {
	url := os.Getenv("PF_NOTIFY_CHILD_DB")
	if url == "" {
		t.Skip("helper process for TestNotificationEmailNeverTwiceAcrossARestartMidSend")
	}
	pool := smallPool(t, url, 2)
	w := workers.NewNotifications(workers.NotificationsConfig{Pool: pool, ID: "child",
		App:  notifyApp(pool, eventstore.New(pool, eventstore.WithUpcaster(domain.Events)), nil, nil),
		Mail: &smtpmail.Config{Addr: os.Getenv("PF_NOTIFY_CHILD_SMTP"), From: "phonefleet@notify.test", TLS: "none"}})
	fmt.Println("child started")
	_, _ = w.EmailOnce(testutil.Context(t))
	fmt.Println("child done") // not reached: killed while the server holds its answer
}

// TestNotificationEmailNeverTwiceAcrossARestartMidSend: an instance sends
// a notification's whole message and is killed (SIGKILL) while the SMTP
// server, which has the message, holds its answer; the attempt is never
// recorded. Once its lease is over, another instance takes the same
// attempt over, finds that the message's end was sent, and records it
// unconfirmed instead of sending a second copy.
func TestNotificationEmailNeverTwiceAcrossARestartMidSend(t *testing.T) {
	e := newNotifyEnv(t)
	mail := smtptest.Start(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	mail.OnData = func(smtptest.Message) error {
		close(arrived)
		<-release
		return nil
	}
	w := e.workers(mail, "parent")
	id := e.raise(t, w)

	cmd := exec.Command(os.Args[0], "-test.run=^TestNotificationEmailChildProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PF_NOTIFY_CHILD_DB="+e.url, "PF_NOTIFY_CHILD_SMTP="+mail.Addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			said.WriteString(sc.Text() + "\n")
		}
	}()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the child never sent the message; it said:\n%s", said.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: the answer never reaches it
		t.Fatal(err)
	}
	_ = cmd.Wait()
	close(release) // the server accepts the message the dead child sent
	waitFor(t, "the server to store the message", func() bool { return len(mail.Messages()) == 1 })

	evs, err := e.store.Load(testutil.Context(t), domain.NotificationEmailStream(id), 1)
	if err != nil || len(evs) != 0 {
		t.Fatalf("got %d recorded attempts (%v); want none: the child died before recording", len(evs), err)
	}
	var attempt int
	var recorded bool
	var by string
	if err := e.pool.QueryRow(testutil.Context(t), `SELECT attempt, recorded, claimed_by FROM claims WHERE reaction = $1 AND key = $2`,
		notifications.EmailReaction, id).Scan(&attempt, &recorded, &by); err != nil || attempt != 1 || recorded || by != "child" {
		t.Fatalf("claim: attempt %d recorded %v by %q (%v); want attempt 1, unrecorded, the child's", attempt, recorded, by, err)
	}

	ctx := testutil.Context(t)
	if got, _ := w.EmailOnce(ctx); len(got) != 0 {
		t.Fatalf("while the dead child's lease lasts: %+v; want nothing", got)
	}
	e.clock.Advance(2 * time.Minute) // past the child's one-minute lease
	got, err := w.EmailOnce(ctx)
	if err != nil || len(got) != 1 || got[0].Attempt != 1 || got[0].Outcome != domain.EmailUnconfirmed {
		t.Fatalf("the takeover: %+v (%v); want attempt 1 recorded unconfirmed", got, err)
	}
	if st, n := e.emailStatus(t, id); st != domain.EmailSent || n != 1 {
		t.Fatalf("got %s after %d attempts; want sent after 1", st, n)
	}
	if marks := e.marks(t, id); marks != 1 {
		t.Fatalf("send marks: %d; want the child's", marks)
	}
	if err := workers.CleanupEmail(ctx, w, e.clock.Now()); err != nil || e.marks(t, id) != 0 {
		t.Fatalf("send marks after the cleanup: %d (%v); want none", e.marks(t, id), err)
	}
	e.clock.Advance(24 * time.Hour)
	if got, _ := w.EmailOnce(ctx); len(got) != 0 {
		t.Fatalf("later: %+v; want nothing more", got)
	}
	if n := len(mail.Messages()); n != 1 {
		t.Fatalf("the SMTP server holds %d copies; want exactly 1", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// append records ev in the environment's organisation (or org).
func (e *notifyEnv) append(t *testing.T, org string, ev domain.Event) {
	t.Helper()
	news, err := eventstore.Encode(domain.Events, org, ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Append(testutil.Context(t), "test-"+domain.NewID("x"), eventstore.NoStream, news...); err != nil {
		t.Fatal(err)
	}
}

// fanout runs the fan-out until nothing is due and returns, per person,
// the kinds of the notifications they got, sorted.
func (e *notifyEnv) fanout(t *testing.T, w *workers.Notifications) map[string][]string {
	t.Helper()
	for {
		e.catchUp(t)
		got, err := w.FanoutOnce(testutil.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if g.Error != "" {
				t.Fatalf("fan-out of %s failed: %s", g.Kind, g.Error)
			}
		}
		if len(got) == 0 {
			break
		}
	}
	e.catchUp(t)
	rows, err := e.pool.Query(testutil.Context(t), `SELECT org_id || '/' || user_id, kind FROM notifications ORDER BY created_at, notification_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var who, kind string
		if err := rows.Scan(&who, &kind); err != nil {
			t.Fatal(err)
		}
		out[who] = append(out[who], kind)
	}
	for _, ks := range out {
		slices.Sort(ks)
	}
	return out
}

// TestNotificationFanoutReachesThePeopleConcerned: each kind reaches the
// people it concerns and nobody else — a run's starter (a key's minter
// when a key started it; not the person who ended it themselves), every
// admin of the organisation for a gateway gone, the device's users of the
// past week when it goes offline, a key's minter a week and a day before
// it expires (the sweep on an injected clock, once per threshold).
func TestNotificationFanoutReachesThePeopleConcerned(t *testing.T) {
	e := newNotifyEnv(t, projections.APIKeys{}, projections.Leases{}, projections.Runs{})
	ctx := testutil.Context(t)
	other := domain.NewID(domain.PrefixOrganisation)
	seen := func(org, user, role string) {
		e.append(t, org, domain.NotificationPersonSeen{UserID: user, Role: role, At: e.clock.Now()})
	}
	seen(e.org, "m1", domain.RoleMember)
	seen(e.org, "m2", domain.RoleMember)
	seen(other, "a9", domain.RoleAdmin)
	w := workers.NewNotifications(workers.NotificationsConfig{Pool: e.pool, App: e.app, ID: "t", Now: e.clock.Now, Logger: quiet})
	now := e.clock.Now()
	who := func(u string) string { return e.org + "/" + u }

	// A key minted by m1, expiring in ten days.
	key := domain.NewID(domain.PrefixAPIKey)
	e.append(t, e.org, domain.APIKeyMinted{KeyID: key, OrgID: e.org, Name: "ci", Scopes: []domain.Scope{domain.ScopeDevicesRead},
		MintedBy: "m1", MintedByRole: domain.RoleMember, SecretHash: []byte{1}, MintedAt: now, ExpiresAt: now.Add(10 * 24 * time.Hour)})
	// Runs: one started by the key (m1's), parked; one started by m2 and
	// ended by the service; one started by m1 and cancelled by m1.
	r1, r2, r3, dev := domain.NewID(domain.PrefixRun), domain.NewID(domain.PrefixRun), domain.NewID(domain.PrefixRun), domain.NewID(domain.PrefixDevice)
	for _, r := range []struct {
		id      string
		starter domain.Actor
	}{{r1, domain.Actor{Kind: "api_key", ID: key}}, {r2, domain.Actor{Kind: "user", ID: "m2"}}, {r3, domain.Actor{Kind: "user", ID: "m1"}}} {
		e.append(t, e.org, domain.RunStarted{RunID: r.id, AgentRunID: domain.NewID(domain.PrefixAgentRun), DeviceID: dev, Goal: "g",
			Executor: domain.ExecutorExternal, MaxSteps: 5, DeadlineAt: now.Add(time.Hour), Starter: r.starter, LeaseID: domain.NewID(domain.PrefixLease), StartedAt: now})
	}
	e.append(t, e.org, domain.RunParked{RunID: r1, DeviceID: dev, Goal: "g", Reason: "captcha", DeadlineAt: now.Add(time.Hour), At: now})
	e.append(t, e.org, domain.RunEnded{RunID: r2, DeviceID: dev, Goal: "g", State: domain.RunStateFailed, EndedAt: now})
	e.append(t, e.org, domain.RunEnded{RunID: r3, DeviceID: dev, Goal: "g", State: domain.RunStateCancelled, By: &domain.Actor{Kind: "user", ID: "m1"}, EndedAt: now})
	// The device: leased by m2 an hour ago, by r1 (so m1) now, by m3 nine
	// days ago; then it goes offline.
	lease := func(holder domain.Actor, at time.Time) {
		e.append(t, e.org, domain.LeaseAcquired{DeviceID: dev, LeaseID: domain.NewID(domain.PrefixLease), FencingToken: 1, Holder: holder,
			AcquiredAt: at, ExpiresAt: at.Add(10 * time.Minute)})
	}
	lease(domain.Actor{Kind: "user", ID: "m2"}, now.Add(-time.Hour))
	lease(domain.Actor{Kind: domain.ActorRun, ID: r1}, now)
	lease(domain.Actor{Kind: "user", ID: "m3"}, now.Add(-9*24*time.Hour))
	e.append(t, e.org, domain.DeviceWentOffline{DeviceID: dev, State: "gone", At: now})
	// Gateways: one lost, one replaced (routine); and one lost elsewhere.
	e.append(t, e.org, domain.GatewayDisconnected{GatewayID: "gw_1", Reason: domain.GatewayReasonHeartbeatLost, At: now})
	e.append(t, e.org, domain.GatewayDisconnected{GatewayID: "gw_1", Reason: domain.GatewayReasonReplaced, At: now})
	e.append(t, other, domain.GatewayDisconnected{GatewayID: "gw_2", Reason: domain.GatewayReasonConnectionLost, At: now})

	got := e.fanout(t, w)
	want := map[string][]string{
		who("m1"):     {domain.NotifyDeviceOffline, domain.NotifyRunNeedsUser},
		who("m2"):     {domain.NotifyDeviceOffline, domain.NotifyRunEnded},
		who(e.admin):  {domain.NotifyGatewayGone},
		other + "/a9": {domain.NotifyGatewayGone},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("notifications per person:\n got  %v\n want %v", got, want)
	}

	// The key-expiry sweep on the injected clock: nothing ten days out,
	// the week's notice at six days, once; the day's at twelve hours, once.
	if n, err := w.SweepOnce(ctx); err != nil || n != 0 {
		t.Fatalf("ten days before expiry: %d notices (%v); want none", n, err)
	}
	e.clock.Advance(4 * 24 * time.Hour)
	if n, err := w.SweepOnce(ctx); err != nil || n != 1 {
		t.Fatalf("six days before expiry: %d notices (%v); want 1", n, err)
	}
	e.fanout(t, w)
	if n, err := w.SweepOnce(ctx); err != nil || n != 0 {
		t.Fatalf("the week's notice again: %d notices (%v); want none", n, err)
	}
	e.clock.Advance(5*24*time.Hour + 12*time.Hour)
	if n, err := w.SweepOnce(ctx); err != nil || n != 1 {
		t.Fatalf("twelve hours before expiry: %d notices (%v); want 1", n, err)
	}
	got = e.fanout(t, w)
	if n, err := w.SweepOnce(ctx); err != nil || n != 0 {
		t.Fatalf("the day's notice again: %d notices (%v); want none", n, err)
	}
	want[who("m1")] = []string{domain.NotifyAPIKeyExpiring, domain.NotifyAPIKeyExpiring, domain.NotifyDeviceOffline, domain.NotifyRunNeedsUser}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("notifications per person after the sweeps:\n got  %v\n want %v", got, want)
	}
	var bodies []string
	rows, _ := e.pool.Query(ctx, `SELECT title FROM notifications WHERE kind = $1 ORDER BY created_at`, domain.NotifyAPIKeyExpiring)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		bodies = append(bodies, s)
	}
	rows.Close()
	if fmt.Sprint(bodies) != "[An API key expires within a week An API key expires within a day]" {
		t.Fatalf("the notices: %v", bodies)
	}
}

// marks counts a notification's e-mail send marks.
func (e *notifyEnv) marks(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(testutil.Context(t), `SELECT count(*) FROM notification_email_sends WHERE notification_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
