package payments

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// FuzzVerifyWebhook feeds arbitrary Stripe webhook deliveries to
// VerifyWebhook, once with the header as sent and once signed correctly:
// nothing panics; every refusal is ErrInvalidSignature or ErrInvalidEvent;
// a correctly signed delivery is never refused for its signature; an event
// accepted has an id, a type and data.object as a JSON object; and a
// delivery signed more than the tolerance away from now is refused.
func FuzzVerifyWebhook(f *testing.F) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, p := range []string{
		`{"id":"evt_1","object":"event","type":"checkout.session.completed","api_version":"2020-08-27","created":1,"data":{"object":{"id":"cs_1"}}}`,
		`{"id":"evt_1","type":"customer.subscription.updated","data":{"object":{"id":"sub_1"},"previous_attributes":{"status":"trialing"}}}`,
		`{"id":"","type":"x","data":{"object":{}}}`, `{"id":"evt_1","type":"x","data":{"object":[]}}`,
		`{"id":"evt_1","type":"x","data":null}`, `[]`, ``, `{"data":{"object":{"a":1e999}}}`,
	} {
		f.Add([]byte(p), SignWebhookForTest([]byte(p), webhookSecret, now), int64(0))
		f.Add([]byte(p), "t=1,v1=00,v0=11", int64(400))
	}
	f.Fuzz(func(t *testing.T, payload []byte, header string, skew int64) {
		check := func(ev Event, err error, signed bool) {
			t.Helper()
			switch {
			case err == nil:
				var obj map[string]json.RawMessage
				if ev.ID == "" || ev.Type == "" || json.Unmarshal(ev.Object, &obj) != nil {
					t.Fatalf("%q accepted as %+v: want an id, a type and an object", payload, ev)
				}
				if len(ev.PreviousAttributes) > 0 && !json.Valid(ev.PreviousAttributes) {
					t.Fatalf("%q: previous attributes %q are not JSON", payload, ev.PreviousAttributes)
				}
			case errors.Is(err, ErrInvalidSignature):
				if signed {
					t.Fatalf("%q signed correctly, refused for its signature: %v", payload, err)
				}
			case errors.Is(err, ErrInvalidEvent):
			default:
				t.Fatalf("%q with %q: got %v; want ErrInvalidSignature or ErrInvalidEvent", payload, header, err)
			}
		}
		ev, err := VerifyWebhook(payload, header, webhookSecret, now)
		check(ev, err, false)

		signed := SignWebhookForTest(payload, webhookSecret, now)
		ev, err = VerifyWebhook(payload, signed, webhookSecret, now)
		check(ev, err, true)

		d := time.Duration(skew%3600) * time.Second
		_, err = VerifyWebhook(payload, signed, webhookSecret, now.Add(d))
		if (d > WebhookTolerance || d < -WebhookTolerance) && !errors.Is(err, ErrInvalidSignature) {
			t.Fatalf("%q signed %s before now: got %v; want ErrInvalidSignature", payload, d, err)
		}
	})
}
