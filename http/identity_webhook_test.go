package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"phonefleet/http/apitest"
)

// The Standard Webhooks reference vector (standard-webhooks' own test
// suite): this secret, id, timestamp and body sign to this value.
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = 1614265330
	swBody      = `{"test": 2432232314}`
	swSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestVerifyStandardWebhookReferenceVector(t *testing.T) {
	at := time.Unix(swTimestamp, 0)
	header := func(sig string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", swMsgID)
		h.Set("webhook-timestamp", strconv.Itoa(swTimestamp))
		h.Set("webhook-signature", sig)
		return h
	}
	tests := []struct {
		name   string
		sig    string
		body   string
		now    time.Time
		wantOK bool
	}{
		{"the reference signature", swSignature, swBody, at, true},
		{"one of several signatures (secret rotation)", "v1,bm90IGl0 " + swSignature + " v2,xyz", swBody, at, true},
		{"body changed by one byte", swSignature, `{"test": 2432232315}`, at, false},
		{"another version", strings.Replace(swSignature, "v1,", "v2,", 1), swBody, at, false},
		{"empty signature", "v1,", swBody, at, false},
		{"timestamp 5 minutes old", swSignature, swBody, at.Add(5 * time.Minute), true},
		{"timestamp too old", swSignature, swBody, at.Add(5*time.Minute + time.Second), false},
		{"timestamp too new", swSignature, swBody, at.Add(-5*time.Minute - time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := verifyStandardWebhook(swSecret, header(tt.sig), []byte(tt.body), tt.now)
			if (err == nil) != tt.wantOK {
				t.Fatalf("got %v; want ok %v", err, tt.wantOK)
			}
			if tt.wantOK && id != swMsgID {
				t.Fatalf("got id %q; want %q", id, swMsgID)
			}
		})
	}
	if _, err := verifyStandardWebhook(swSecret, http.Header{}, []byte(swBody), at); err == nil {
		t.Fatal("got no error without the three headers; want one")
	}
}

// signIdentity signs body as the identity provider does.
func signIdentity(t *testing.T, secret, id string, at time.Time, body string) http.Header {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + body))
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/json")
	return h
}

func membershipDeleted(org, user string) string {
	return `{"object":"event","type":"organizationMembership.deleted","timestamp":1700000000000,` +
		`"data":{"id":"orgmem_1","object":"organization_membership","role":"org:member",` +
		`"organization":{"id":"` + org + `","name":"Acme"},"public_user_data":{"user_id":"` + user + `","identifier":"cat@example.com"}}}`
}

// TestIdentityWebhookSwitchesOffDepartedPersonsAppWebhooks: a signed
// membership-deleted event at POST /webhooks/identity switches off the
// webhooks OAuth apps made for that person (spec 5.2), and nothing else;
// a forged, stale or unreadable delivery changes nothing.
func TestIdentityWebhookSwitchesOffDepartedPersonsAppWebhooks(t *testing.T) {
	e := newWHEnv(t)
	now := time.Now()
	e.s.deps.Identity.IdentityWebhookSecret = swSecret
	e.s.deps.Identity.IdentityWebhookClock = func() time.Time { return now }
	appID, _ := e.create("app", "https://hooks.example.com/app")
	otherPersonsID, _ := e.create("app-other", "https://hooks.example.com/other")
	consoleID, _ := e.create("console", "https://hooks.example.com/console")

	deliver := func(t *testing.T, h http.Header, body string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequest("POST", "/webhooks/identity", strings.NewReader(body))
		for k, v := range h {
			req.Header[k] = v
		}
		resp, raw := apitest.Do(t, e.s.Handler(), req)
		e.v.Check(t, req, resp, raw)
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("body is not JSON: %s", raw)
		}
		return resp.StatusCode, out
	}
	enabled := func(principal, id string) any {
		_, body := e.do(principal, "GET", "/v1/webhooks/"+id, "")
		return body["enabled"]
	}

	body := membershipDeleted("org_a", "u_cat")
	refusals := []struct {
		name   string
		header http.Header
		body   string
		code   string
	}{
		{"no signature", http.Header{"Content-Type": {"application/json"}}, body, "invalid_signature"},
		{"signed with another secret", signIdentity(t, "whsec_"+base64.StdEncoding.EncodeToString(make([]byte, 24)), "msg_1", now, body), body, "invalid_signature"},
		{"body altered after signing", signIdentity(t, swSecret, "msg_1", now, body), strings.Replace(body, "u_cat", "u_bob", 1), "invalid_signature"},
		{"replayed after the tolerance", signIdentity(t, swSecret, "msg_1", now.Add(-6*time.Minute), body), body, "invalid_signature"},
		{"signed but not an event", signIdentity(t, swSecret, "msg_2", now, `[1,2]`), `[1,2]`, "invalid_event"},
		{"membership event without the person", signIdentity(t, swSecret, "msg_3", now, `{"type":"organizationMembership.deleted","data":{}}`),
			`{"type":"organizationMembership.deleted","data":{}}`, "invalid_event"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, out := deliver(t, tt.header, tt.body)
			if status != http.StatusBadRequest || errCode(out) != tt.code {
				t.Fatalf("got %d %v; want 400 %s", status, out, tt.code)
			}
			if enabled("app", appID) != true {
				t.Fatal("a refused delivery switched the webhook off")
			}
		})
	}
	t.Run("another event type is acknowledged and ignored", func(t *testing.T) {
		other := `{"type":"user.updated","data":{"id":"u_cat"}}`
		status, out := deliver(t, signIdentity(t, swSecret, "msg_4", now, other), other)
		if status != http.StatusOK || out["webhooksDisabled"] != float64(0) || out["type"] != "user.updated" {
			t.Fatalf("got %d %v; want 200 with nothing switched off", status, out)
		}
	})
	t.Run("the person left: their apps' webhooks are switched off", func(t *testing.T) {
		status, out := deliver(t, signIdentity(t, swSecret, "msg_5", now, body), body)
		if status != http.StatusOK || out["webhooksDisabled"] != float64(1) {
			t.Fatalf("got %d %v; want 200 with one webhook switched off", status, out)
		}
		_, got := e.do("app", "GET", "/v1/webhooks/"+appID, "")
		if got["enabled"] != false || got["disabledReason"] != "person_left" {
			t.Fatalf("got %v; want switched off with reason person_left", got)
		}
		if enabled("app-other", otherPersonsID) != true || enabled("console", consoleID) != true {
			t.Fatal("a webhook of another person or of the console was switched off; want only the departed person's app webhooks")
		}
	})
	t.Run("a redelivery changes nothing", func(t *testing.T) {
		status, out := deliver(t, signIdentity(t, swSecret, "msg_5", now, body), body)
		if status != http.StatusOK || out["webhooksDisabled"] != float64(0) {
			t.Fatalf("got %d %v; want 200 with nothing more switched off", status, out)
		}
	})
	t.Run("only that person switches it on again", func(t *testing.T) {
		if status, _ := e.do("admin", "PATCH", "/v1/webhooks/"+appID, `{"enabled":true}`); status != http.StatusForbidden {
			t.Fatalf("an admin: got %d; want 403", status)
		}
		if status, _ := e.do("app", "PATCH", "/v1/webhooks/"+appID, `{"enabled":true}`); status != http.StatusOK {
			t.Fatalf("the person: got %d; want 200", status)
		}
	})
	t.Run("without the secret the route is not served", func(t *testing.T) {
		e.s.deps.Identity.IdentityWebhookSecret = ""
		status, out := deliver(t, signIdentity(t, swSecret, "msg_6", now, body), body)
		if status != http.StatusNotFound || errCode(out) != "not_found" {
			t.Fatalf("got %d %v; want 404 not_found", status, out)
		}
	})
}
