package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/commands/webhooks"
	"phonefleet/domain"
	"phonefleet/projections"
)

// TestShapes pins the JSON both surfaces answer, to the byte, from read
// model values: a renamed field or a lost omitempty fails here first.
func TestShapes(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.UTC)
	lease := &projections.DeviceLeaseView{Holder: domain.Actor{Kind: "user", ID: "usr_1"}.ForReceipt(), AcquiredAt: at, ExpiresAt: at.Add(time.Minute)}
	rotated := at.Add(time.Hour)
	status, failure := 500, "boom"
	tests := []struct {
		name string
		v    any
		want string
	}{
		{
			name: "device without lease",
			v:    NewDevice(projections.DeviceView{DeviceID: "dev_1", Name: "P", Backend: "sim", Status: "online", RegisteredAt: at, UpdatedAt: at, OrgID: "org_x"}),
			want: `{"deviceId":"dev_1","name":"P","backend":"sim","status":"online","leased":false,"registeredAt":"2026-03-04T05:06:07.891234Z","updatedAt":"2026-03-04T05:06:07.891234Z"}`,
		},
		{
			name: "device page with a leased device",
			v: NewDevicePage(fleet.DevicePage{NextAfter: "dev_2", Devices: []projections.DeviceView{{DeviceID: "dev_2", Name: "Q", Backend: "adb",
				Model: "Pixel", Width: 10, Height: 20, Status: "asleep", Leased: true, Lease: lease, RegisteredAt: at, UpdatedAt: at}}}),
			want: `{"devices":[{"deviceId":"dev_2","name":"Q","backend":"adb","model":"Pixel","width":10,"height":20,"status":"asleep","leased":true,` +
				`"lease":{"holder":{"userId":"usr_1"},"acquiredAt":"2026-03-04T05:06:07.891234Z","expiresAt":"2026-03-04T05:07:07.891234Z"},` +
				`"registeredAt":"2026-03-04T05:06:07.891234Z","updatedAt":"2026-03-04T05:06:07.891234Z"}],"nextAfter":"dev_2"}`,
		},
		{name: "empty device page", v: NewDevicePage(fleet.DevicePage{}), want: `{"devices":[]}`},
		{
			name: "driving",
			v:    NewDriving(fleet.Driving{DeviceID: "dev_2", Driving: true, Lease: lease}),
			want: `{"deviceId":"dev_2","driving":true,"lease":{"holder":{"userId":"usr_1"},"acquiredAt":"2026-03-04T05:06:07.891234Z","expiresAt":"2026-03-04T05:07:07.891234Z"}}`,
		},
		{name: "nobody driving", v: NewDriving(fleet.Driving{DeviceID: "dev_2"}), want: `{"deviceId":"dev_2","driving":false}`},
		{
			name: "lease page",
			v: NewLeasePage(fleet.LeasePage{Leases: []projections.LeaseView{{LeaseID: "lse_1", DeviceID: "dev_1",
				Holder: domain.Actor{Kind: "api_key", ID: "key_1"}.ForReceipt(), FencingToken: 7, AcquiredAt: at, ExpiresAt: at}}}),
			want: `{"leases":[{"leaseId":"lse_1","deviceId":"dev_1","holder":{"apiKeyId":"key_1"},"fencingToken":7,` +
				`"acquiredAt":"2026-03-04T05:06:07.891234Z","expiresAt":"2026-03-04T05:06:07.891234Z"}]}`,
		},
		{
			name: "webhook list",
			v: NewWebhookList([]projections.WebhookView{{ID: "whk_1", URL: "https://x", Events: []string{"run.ended"}, Enabled: true, SecretHint: "abcd", CreatedAt: at},
				{ID: "whk_2", URL: "https://y", DisabledReason: "gone", SecretHint: "efgh", CreatedAt: at, SecretRotatedAt: &rotated}}),
			want: `{"webhooks":[{"webhookId":"whk_1","url":"https://x","events":["run.ended"],"enabled":true,"disabledReason":null,"secretHint":"abcd",` +
				`"createdAt":"2026-03-04T05:06:07.891234Z","secretRotatedAt":null},{"webhookId":"whk_2","url":"https://y","events":[],"enabled":false,` +
				`"disabledReason":"gone","secretHint":"efgh","createdAt":"2026-03-04T05:06:07.891234Z","secretRotatedAt":"2026-03-04T06:06:07.891234Z"}]}`,
		},
		{name: "empty webhook list", v: NewWebhookList(nil), want: `{"webhooks":[]}`},
		{
			name: "webhook with its secret",
			v:    NewWebhookWithSecret(projections.WebhookView{ID: "whk_1", URL: "https://x", Events: []string{"run.ended"}, Enabled: true, SecretHint: "abcd", CreatedAt: at}, "s3cret"),
			want: `{"webhook":{"webhookId":"whk_1","url":"https://x","events":["run.ended"],"enabled":true,"disabledReason":null,"secretHint":"abcd",` +
				`"createdAt":"2026-03-04T05:06:07.891234Z","secretRotatedAt":null},"secret":"s3cret"}`,
		},
		{name: "test delivery", v: NewTestDelivery("dlv_1"), want: `{"deliveryId":"dlv_1","status":"pending"}`},
		{
			name: "delivery page",
			v: NewDeliveryPage(webhooks.DeliveryPage{Next: &projections.DeliveryCursor{CreatedAt: at, DeliveryID: "dlv_0"},
				Deliveries: []projections.DeliveryView{{ID: "dlv_2", WebhookID: "whk_1", Event: "run.ended", Status: "failed", Attempts: 3,
					ResponseStatus: &status, Error: &failure, Payload: []byte(`{"a":1}`), CreatedAt: at, LastAttemptAt: &rotated, NextAttemptAt: &rotated}}}),
			want: `{"deliveries":[{"deliveryId":"dlv_2","webhookId":"whk_1","event":"run.ended","status":"failed","attempts":3,"responseStatus":500,` +
				`"error":"boom","payloadPreview":"{\"a\":1}","createdAt":"2026-03-04T05:06:07.891234Z","lastAttemptAt":"2026-03-04T06:06:07.891234Z",` +
				`"nextAttemptAt":"2026-03-04T06:06:07.891234Z"}],"nextBefore":"1772600767891234_dlv_0"}`,
		},
		{name: "last delivery page", v: NewDeliveryPage(webhooks.DeliveryPage{}), want: `{"deliveries":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestPayloadPreview(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    string
	}{
		{name: "short", payload: `{"a":1}`, want: `{"a":1}`},
		{name: "exactly the limit", payload: strings.Repeat("a", 1000), want: strings.Repeat("a", 1000)},
		{name: "cut on a character boundary", payload: strings.Repeat("é", 600), want: strings.Repeat("é", 500) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewDelivery(projections.DeliveryView{Payload: []byte(tt.payload)}).PayloadPreview; got != tt.want {
				t.Errorf("got %d bytes %q; want %d bytes", len(got), got, len(tt.want))
			}
		})
	}
}

func TestDeliveryCursor(t *testing.T) {
	c := projections.DeliveryCursor{CreatedAt: time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.UTC), DeliveryID: domain.NewID(domain.PrefixDelivery)}
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{name: "as written", in: FormatDeliveryCursor(c), ok: true},
		{name: "no separator", in: "123", ok: false},
		{name: "not a number", in: "x_dlv_1", ok: false},
		{name: "not a delivery id", in: "1_whk_1", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseDeliveryCursor(tt.in)
			if ok != tt.ok {
				t.Fatalf("got ok %v; want %v", ok, tt.ok)
			}
			if ok && got != c {
				t.Errorf("got %+v; want %+v", got, c)
			}
		})
	}
}
