package provisioning_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/payments"
	"phonefleet/projections"
	"phonefleet/testutil"
	"phonefleet/workers"
)

// syncBuffer is a log sink the reactor's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestPaymentFollowupOperatorTools: a follow-up the provider refused and
// one that gave up after every attempt are listed for the operator and
// logged at ERROR once each; a retry (an event with the operator as
// actor) makes one due again, attempted with the same idempotency key; a
// settle with a reason closes the other by hand; neither can be retried or
// settled twice, and the read model rebuilds equal.
func TestPaymentFollowupOperatorTools(t *testing.T) {
	e := newFollowupEnv(t)
	logs := &syncBuffer{}
	e.w = workers.NewPaymentFollowups(workers.PaymentFollowupsConfig{Pool: e.Pool, Record: e.app.Provisioning.RecordPaymentFollowup,
		Provider: payments.New(payments.Config{SecretKey: "sk_test_phonefleet", APIBase: e.mockURL, MaxNetworkRetries: -1}),
		Now:      e.clock.Now, ID: "test", Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	org := domain.NewID(domain.PrefixOrganisation)
	ctx := testutil.Context(t)
	op := eventstore.WithActor(ctx, "operator", "ops@example.test")
	c := e.app.Provisioning

	refusedFul := e.paidOrder(t, org, emulatorMonthly, 1)[0]
	if _, err := c.RefundFulfilment.Handle(ctx, provisioning.RefundFulfilment{FulfilmentID: refusedFul}); err != nil {
		t.Fatal(err)
	}
	e.mock.setRefusing(true)
	if as := e.once(t); len(as) != 1 || as[0].Event.Outcome != domain.FollowupRefused {
		t.Fatalf("attempts while the provider refuses: %+v; want one refused", as)
	}
	e.mock.setRefusing(false)
	refused := e.only(t, refusedFul)

	gaveUpFul := e.paidOrder(t, org, pixelMonthly, 1)[0]
	if _, err := c.RefundFulfilment.Handle(ctx, provisioning.RefundFulfilment{FulfilmentID: gaveUpFul}); err != nil {
		t.Fatal(err)
	}
	e.mock.setDown(true)
	for i := range domain.FollowupMaxAttempts {
		as := e.once(t)
		if len(as) != 1 {
			t.Fatalf("attempt %d: %+v; want one", i+1, as)
		}
		if i < len(domain.FollowupRetryGaps) {
			e.clock.Advance(domain.FollowupRetryGaps[i])
		}
	}
	e.mock.setDown(false)
	gaveUp := e.only(t, gaveUpFul)
	if gaveUp.Status != projections.FollowupFailed || gaveUp.Attempts != domain.FollowupMaxAttempts {
		t.Fatalf("follow-up after every attempt: %+v; want failed after %d", gaveUp, domain.FollowupMaxAttempts)
	}

	t.Run("the_stuck_are_listed", func(t *testing.T) {
		got, err := c.ListStuckFollowups.Handle(ctx, provisioning.ListStuckFollowups{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, f := range got {
			ids = append(ids, f.FollowupID+" "+f.Status)
		}
		want := []string{refused.FollowupID + " " + projections.FollowupRefused, gaveUp.FollowupID + " " + projections.FollowupFailed}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("got %v; want %v", ids, want)
		}
	})

	t.Run("each_is_logged_at_error_once", func(t *testing.T) {
		n := map[string]int{}
		for _, l := range logs.lines() {
			if l["level"] == "ERROR" && l["msg"] == "payment follow-up needs the operator" {
				n[l["followup_id"].(string)+" "+l["outcome"].(string)]++
				if l["org_id"] != org || l["fulfilment_id"] == "" || l["action"] == "" {
					t.Errorf("log line %v lacks the organisation, fulfilment or action", l)
				}
			}
		}
		want := map[string]int{refused.FollowupID + " " + domain.FollowupRefused: 1, gaveUp.FollowupID + " " + domain.FollowupGaveUp: 1}
		if len(n) != len(want) || n[refused.FollowupID+" "+domain.FollowupRefused] != 1 || n[gaveUp.FollowupID+" "+domain.FollowupGaveUp] != 1 {
			t.Errorf("got ERROR lines %v; want %v", n, want)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			err  error
			code domain.Code
		}{
			{"unknown_id_retry", func() error {
				_, err := c.RetryPaymentFollowup.Handle(op, provisioning.RetryPaymentFollowup{FollowupID: "pfu_nothing"})
				return err
			}(), domain.CodeNotFound},
			{"no_reason", func() error {
				_, err := c.SettlePaymentFollowup.Handle(op, provisioning.SettlePaymentFollowup{FollowupID: refused.FollowupID, Reason: "  "})
				return err
			}(), domain.CodeInvalidArgument},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if got := domain.ErrorCode(tc.err); got != tc.code {
					t.Errorf("got %v (%v); want %s", got, tc.err, tc.code)
				}
			})
		}
	})

	t.Run("retry_makes_it_due_again", func(t *testing.T) {
		ev, err := c.RetryPaymentFollowup.Handle(op, provisioning.RetryPaymentFollowup{FollowupID: gaveUp.FollowupID})
		if err != nil {
			t.Fatal(err)
		}
		if ev.AfterAttempt != domain.FollowupMaxAttempts || ev.By != (domain.Actor{Kind: "operator", ID: "ops@example.test"}) {
			t.Errorf("retry event %+v; want after attempt %d by the operator", ev, domain.FollowupMaxAttempts)
		}
		evs, err := e.Store.Load(ctx, domain.PaymentFollowupOperatorStream(gaveUp.FollowupID), 1)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := evs[0].DecodeMetadata(); len(evs) != 1 || evs[0].Type != "payment.followup_retried" || m.ActorKind != "operator" ||
			m.ActorID != "ops@example.test" || evs[0].OrgID != org {
			t.Errorf("operator stream %+v (metadata %+v); want one payment.followup_retried by the operator", evs, m)
		}
		if _, err := c.RetryPaymentFollowup.Handle(op, provisioning.RetryPaymentFollowup{FollowupID: gaveUp.FollowupID}); domain.ErrorCode(err) != domain.CodeWrongState {
			t.Errorf("a second retry before the attempt: %v; want wrong_state", err)
		}
		if _, err := c.SettlePaymentFollowup.Handle(op, provisioning.SettlePaymentFollowup{FollowupID: gaveUp.FollowupID, Reason: "x"}); domain.ErrorCode(err) != domain.CodeWrongState {
			t.Errorf("a settle while the retry is due: %v; want wrong_state", err)
		}
		if f := e.only(t, gaveUpFul); f.Status != projections.FollowupPending {
			t.Errorf("follow-up after the retry: %+v; want pending", f)
		}
		before, _ := e.mock.requests()
		as := e.once(t)
		if len(as) != 1 || as[0].Event.FollowupID != gaveUp.FollowupID || as[0].Event.Attempt != domain.FollowupMaxAttempts+1 ||
			as[0].Event.Outcome != domain.FollowupDone {
			t.Fatalf("attempts after the retry: %+v; want attempt %d done", as, domain.FollowupMaxAttempts+1)
		}
		after, _ := e.mock.requests()
		// The owner refund's attempt: the cancel with the follow-up's key,
		// then the read of the paid invoice and the share's refund.
		if len(after) != len(before)+3 || after[len(before)].key != domain.PaymentFollowupKey(gaveUp.FollowupID) {
			t.Errorf("the retried attempt did not carry the follow-up's key %s: %+v", domain.PaymentFollowupKey(gaveUp.FollowupID), after[len(before):])
		}
		if f := e.only(t, gaveUpFul); f.Status != projections.FollowupDone {
			t.Errorf("follow-up after its retried attempt: %+v; want done", f)
		}
	})

	t.Run("settle_closes_it_by_hand", func(t *testing.T) {
		ev, err := c.SettlePaymentFollowup.Handle(op, provisioning.SettlePaymentFollowup{FollowupID: refused.FollowupID,
			Reason: "subscription cancelled in the dashboard"})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Reason != "subscription cancelled in the dashboard" || ev.By.ID != "ops@example.test" || ev.AfterAttempt != 1 {
			t.Errorf("settle event %+v", ev)
		}
		if f := e.only(t, refusedFul); f.Status != projections.FollowupSettled {
			t.Errorf("follow-up after settle: %+v; want settled", f)
		}
		if _, err := c.SettlePaymentFollowup.Handle(op, provisioning.SettlePaymentFollowup{FollowupID: refused.FollowupID, Reason: "again"}); domain.ErrorCode(err) != domain.CodeWrongState {
			t.Errorf("a second settle: %v; want wrong_state", err)
		}
		if _, err := c.RetryPaymentFollowup.Handle(op, provisioning.RetryPaymentFollowup{FollowupID: refused.FollowupID}); domain.ErrorCode(err) != domain.CodeWrongState {
			t.Errorf("a retry of a settled follow-up: %v; want wrong_state", err)
		}
		e.clock.Advance(24 * 60 * 60 * 1e9)
		if as := e.once(t); len(as) != 0 {
			t.Errorf("a settled follow-up was attempted: %+v", as)
		}
		if got, err := c.ListStuckFollowups.Handle(ctx, provisioning.ListStuckFollowups{}); err != nil || len(got) != 0 {
			t.Errorf("stuck after retry and settle: %+v (%v); want none", got, err)
		}
	})

	t.Run("the_read_model_rebuilds_equal", func(t *testing.T) {
		rows := followupRowsText(t, e)
		if err := e.runner.Rebuild(ctx, projections.PaymentFollowupsName, nil); err != nil {
			t.Fatal(err)
		}
		if again := followupRowsText(t, e); again != rows {
			t.Errorf("rebuild changed the rows:\nbefore\n%s\nafter\n%s", rows, again)
		}
	})
}
