package payments

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"phonefleet/testutil"
)

const webhookSecret = "whsec_test_phonefleet"

// fixture reads one of stripe-mock's objects (Stripe's own fixtures), as
// JSON to build webhook events from.
func fixture(t *testing.T, path string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, testutil.StripeMock(t)+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_phonefleet")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var obj map[string]any
	if err := json.NewDecoder(res.Body).Decode(&obj); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s (%v)", path, res.Status, err)
	}
	return obj
}

// event wraps object in a Stripe event envelope, rendered in an API
// version other than stripe-go's.
func event(t *testing.T, typ string, object map[string]any, created time.Time) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"id": "evt_1", "object": "event", "type": typ, "api_version": "2020-08-27", "created": created.Unix(),
		"livemode": false, "pending_webhooks": 1, "data": map[string]any{"object": object},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerifyWebhook(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	session := fixture(t, "/v1/checkout/sessions/cs_test_1")
	session["metadata"] = map[string]any{MetaOrgID: "org_a", MetaOrderID: "ord_1"}
	session["client_reference_id"] = "ord_1"
	payload := event(t, EventCheckoutCompleted, session, now.Add(-time.Minute))
	good := SignWebhookForTest(payload, webhookSecret, now.Add(-10*time.Second))

	t.Run("good signature", func(t *testing.T) {
		ev, err := VerifyWebhook(payload, good, webhookSecret, now)
		if err != nil {
			t.Fatalf("got %v; want the event", err)
		}
		if ev.ID != "evt_1" || ev.Type != EventCheckoutCompleted || !ev.Created.Equal(now.Add(-time.Minute)) || ev.APIVersion != "2020-08-27" {
			t.Fatalf("got %+v; want evt_1, %s, created a minute ago, API version as sent", ev, EventCheckoutCompleted)
		}
		if ev.ObjectType() != "checkout.session" || ev.ObjectID() != session["id"] || ev.ObjectMetadata()[MetaOrderID] != "ord_1" {
			t.Fatalf("got object %q %q %v; want the session and its metadata", ev.ObjectType(), ev.ObjectID(), ev.ObjectMetadata())
		}
		cs, err := ev.CheckoutSession()
		if err != nil || cs.ID != session["id"] || cs.Metadata[MetaOrgID] != "org_a" || cs.ClientReferenceID != "ord_1" || cs.Mode == "" {
			t.Fatalf("got %+v, %v; want the session with its order", cs, err)
		}
		if _, err := ev.Subscription(); !errors.Is(err, ErrInvalidEvent) {
			t.Fatalf("reading a session as a subscription: got %v; want ErrInvalidEvent", err)
		}
	})

	for _, tc := range []struct {
		name    string
		payload []byte
		header  string
		secret  string
		want    error
	}{
		{"tampered body", append([]byte(nil), payload[:len(payload)-1]...), good, webhookSecret, ErrInvalidSignature},
		{"wrong secret", payload, good, "whsec_other", ErrInvalidSignature},
		{"no header", payload, "", webhookSecret, ErrInvalidSignature},
		{"malformed header", payload, "t=abc,v1=zz", webhookSecret, ErrInvalidSignature},
		{"no secret configured", payload, good, "", ErrInvalidSignature},
		{"stale", payload, SignWebhookForTest(payload, webhookSecret, now.Add(-WebhookTolerance-time.Second)), webhookSecret, ErrInvalidSignature},
		{"from the future", payload, SignWebhookForTest(payload, webhookSecret, now.Add(WebhookTolerance+time.Second)), webhookSecret, ErrInvalidSignature},
		{"just within tolerance", payload, SignWebhookForTest(payload, webhookSecret, now.Add(-WebhookTolerance)), webhookSecret, nil},
		{"rolled secret: one of two signatures", payload,
			fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(), sign([]byte("x"), "whsec_old", now), sign(payload, webhookSecret, now)),
			webhookSecret, nil},
		{"unreadable JSON", []byte(`{"id":"evt_1",`), SignWebhookForTest([]byte(`{"id":"evt_1",`), webhookSecret, now), webhookSecret, ErrInvalidEvent},
		{"not an event", []byte(`{"hello":"world"}`), SignWebhookForTest([]byte(`{"hello":"world"}`), webhookSecret, now), webhookSecret, ErrInvalidEvent},
		{"no object", []byte(`{"id":"evt_1","type":"x.y","data":{"object":null}}`),
			SignWebhookForTest([]byte(`{"id":"evt_1","type":"x.y","data":{"object":null}}`), webhookSecret, now), webhookSecret, ErrInvalidEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyWebhook(tc.payload, tc.header, tc.secret, now)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v; want %v", err, tc.want)
			}
			if tc.want == ErrInvalidSignature && errors.Is(err, ErrInvalidEvent) || tc.want == ErrInvalidEvent && errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("got %v; want only %v", err, tc.want)
			}
		})
	}
}

// TestVerifyWebhookStaleAndUnreadable checks the order of the checks: a
// stale delivery is refused for its signature even when its body is not
// an event, so an old capture never reaches the parser's answer.
func TestVerifyWebhookStaleAndUnreadable(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	body := []byte(`not json`)
	_, err := VerifyWebhook(body, SignWebhookForTest(body, webhookSecret, now.Add(-time.Hour)), webhookSecret, now)
	if !errors.Is(err, ErrInvalidSignature) {
		t.Fatalf("got %v; want ErrInvalidSignature", err)
	}
}

func TestStripeMockEventFixture(t *testing.T) {
	// stripe-mock's own event (api_version null, a plan as its object).
	payload, err := json.Marshal(fixture(t, "/v1/events/evt_1"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev, err := VerifyWebhook(payload, SignWebhookForTest(payload, webhookSecret, now), webhookSecret, now)
	if err != nil || ev.ID == "" || ev.Type == "" || ev.ObjectType() == "" {
		t.Fatalf("got %+v, %v; want the fixture event read whatever its API version", ev, err)
	}
}

func TestEventObjects(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	meta := map[string]any{MetaOrgID: "org_a", MetaOrderID: "ord_1"}
	verify := func(t *testing.T, typ string, obj map[string]any) Event {
		t.Helper()
		obj["metadata"] = meta
		payload := event(t, typ, obj, now)
		ev, err := VerifyWebhook(payload, SignWebhookForTest(payload, webhookSecret, now), webhookSecret, now)
		if err != nil {
			t.Fatal(err)
		}
		if ev.ObjectMetadata()[MetaOrderID] != "ord_1" {
			t.Fatalf("metadata: got %v; want the order", ev.ObjectMetadata())
		}
		return ev
	}
	t.Run("subscription", func(t *testing.T) {
		obj := fixture(t, "/v1/subscriptions/sub_1")
		s, err := verify(t, EventSubscriptionDeleted, obj).Subscription()
		if err != nil || s.ID != obj["id"] || s.Status == "" || s.Metadata[MetaOrgID] != "org_a" {
			t.Fatalf("got %+v, %v", s, err)
		}
	})
	t.Run("invoice", func(t *testing.T) {
		obj := fixture(t, "/v1/invoices/in_1")
		obj["subscription_details"] = map[string]any{"metadata": meta}
		inv, err := verify(t, EventInvoicePaid, obj).Invoice()
		if err != nil || inv.ID != obj["id"] || inv.SubscriptionMetadata[MetaOrderID] != "ord_1" || inv.Currency == "" {
			t.Fatalf("got %+v, %v", inv, err)
		}
	})
	t.Run("payment intent", func(t *testing.T) {
		obj := fixture(t, "/v1/payment_intents/pi_1")
		p, err := verify(t, EventPaymentIntentSucceeded, obj).Payment()
		if err != nil || p.ID != obj["id"] || p.Amount == 0 || p.Metadata[MetaOrgID] != "org_a" {
			t.Fatalf("got %+v, %v", p, err)
		}
	})
	t.Run("charge", func(t *testing.T) {
		obj := fixture(t, "/v1/charges/ch_1")
		obj["payment_intent"] = "pi_paid"
		c, err := verify(t, EventChargeRefunded, obj).Charge()
		if err != nil || c.ID != obj["id"] || c.PaymentIntentID != "pi_paid" || c.Amount == 0 {
			t.Fatalf("got %+v, %v", c, err)
		}
	})
	t.Run("dispute", func(t *testing.T) {
		obj := fixture(t, "/v1/disputes/dp_1")
		d, err := verify(t, EventDisputeCreated, obj).Dispute()
		if err != nil || d.ID != obj["id"] || d.ChargeID == "" || d.Status == "" || d.Reason == "" {
			t.Fatalf("got %+v, %v", d, err)
		}
	})
	t.Run("refund", func(t *testing.T) {
		obj := fixture(t, "/v1/refunds/re_1")
		obj["payment_intent"] = "pi_paid"
		r, err := verify(t, "refund.updated", obj).Refund()
		if err != nil || r.ID != obj["id"] || r.PaymentID != "pi_paid" || r.Amount == 0 {
			t.Fatalf("got %+v, %v", r, err)
		}
	})
}

func TestSignWebhookForTest(t *testing.T) {
	at := time.Unix(1_772_366_400, 0)
	payload := []byte(`{"id":"evt_1"}`)
	h := SignWebhookForTest(payload, webhookSecret, at)
	if want := fmt.Sprintf("t=%d,v1=%s", at.Unix(), sign(payload, webhookSecret, at)); h != want {
		t.Fatalf("got %q; want %q", h, want)
	}
	if !regexp.MustCompile(`^t=\d+,v1=[0-9a-f]{64}$`).MatchString(h) {
		t.Fatalf("got %q; want t=<unix>,v1=<hex sha256>", h)
	}
}

// sign is Stripe's v1 scheme written out: HMAC-SHA256 over "t.payload".
func sign(payload []byte, secret string, at time.Time) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.", at.Unix())
	mac.Write(payload)
	return hex.EncodeToString(mac.Sum(nil))
}
