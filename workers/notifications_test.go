package workers_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
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
	app    notifications.Handlers
	org    string
	admin  string
}

func newNotifyEnv(t *testing.T) *notifyEnv {
	t.Helper()
	url := testutil.DatabaseURL(t)
	pool := smallPool(t, url, 6)
	store := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, quiet, []projections.Projection{projections.Notifications{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.Ensure(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() { runner.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	e := &notifyEnv{pool: pool, url: url, store: store, runner: runner, clock: newClock(),
		org: domain.NewID(domain.PrefixOrganisation), admin: "user_" + domain.NewID("x")[2:10]}
	e.app = notifyApp(pool, store, runner, e.clock.Now)
	_, err = e.app.SetNotificationPreferences.Handle(testutil.Context(t), notifications.SetNotificationPreferences{
		Auth:   domain.Auth{OrgID: e.org, Kind: domain.PrincipalConsole, UserID: e.admin, Role: domain.RoleAdmin},
		Change: domain.NotificationPreferencesChange{Email: ptr(e.admin + "@example.com")}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ptr[T any](v T) *T { return &v }

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
	if err := e.runner.WaitFor(ctx, projections.NotificationsName, last); err != nil {
		t.Fatal(err)
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
