package domain

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestDeliveryIDIsDerivedAndShapedLikeAnID(t *testing.T) {
	ev := uuid.MustParse("0190a1b2-c3d4-7e5f-8071-8293a4b5c6d7")
	a, b := DeliveryID("whk_1", ev), DeliveryID("whk_1", ev)
	if a != b {
		t.Fatalf("got %s then %s for the same pair; want the same id", a, b)
	}
	if !HasPrefix(a, PrefixDelivery) {
		t.Fatalf("got %q; want dlv_ and 32 hex digits", a)
	}
	if c := DeliveryID("whk_2", ev); c == a {
		t.Fatalf("got %s for two subscriptions; want different ids", c)
	}
	if c := DeliveryID("whk_1", uuid.Must(uuid.NewV7())); c == a {
		t.Fatalf("got %s for two events; want different ids", c)
	}
}

func TestDecideWebhookAttemptFollowsTheSchedule(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		attempt int
		status  int
		errCode string
		outcome string
		gap     time.Duration // 0: no next attempt
	}{
		{"2xx delivers", 1, 204, "", WebhookDelivered, 0},
		{"first failure waits 30 s", 1, 500, "", WebhookRetrying, 30 * time.Second},
		{"second failure waits 2 min", 2, 0, WebhookErrorTimeout, WebhookRetrying, 2 * time.Minute},
		{"third failure waits 5 min", 3, 302, "", WebhookRetrying, 5 * time.Minute},
		{"fourth failure waits 18 min", 4, 404, "", WebhookRetrying, 18 * time.Minute},
		{"fifth failure gives up", 5, 500, "", WebhookGaveUp, 0},
		{"fifth attempt may still deliver", 5, 200, "", WebhookDelivered, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := DecideWebhookAttempt("dlv_x", "whk_x", tt.attempt, at, tt.status, tt.errCode)
			if e.Outcome != tt.outcome {
				t.Errorf("got outcome %s; want %s", e.Outcome, tt.outcome)
			}
			switch {
			case tt.gap == 0 && e.NextAttemptAt != nil:
				t.Errorf("got next attempt %v; want none", e.NextAttemptAt)
			case tt.gap != 0 && (e.NextAttemptAt == nil || !e.NextAttemptAt.Equal(at.Add(tt.gap))):
				t.Errorf("got next attempt %v; want %v", e.NextAttemptAt, at.Add(tt.gap))
			}
			if tt.status == 0 && (e.ResponseStatus != nil || e.Error != tt.errCode) {
				t.Errorf("got status %v error %q; want no status and %q", e.ResponseStatus, e.Error, tt.errCode)
			}
			if tt.status != 0 && (e.ResponseStatus == nil || *e.ResponseStatus != tt.status || e.Error != "") {
				t.Errorf("got status %v error %q; want %d and no error", e.ResponseStatus, e.Error, tt.status)
			}
		})
	}
	var total time.Duration
	for _, g := range WebhookRetryGaps {
		total += g
	}
	if total != 25*time.Minute+30*time.Second {
		t.Errorf("got gaps totalling %s; want about 25 minutes (25m30s)", total)
	}
}

// fakeResolver resolves names from a table; a name not in it does not exist.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func reasonOf(err error) string {
	var de *Error
	if !errors.As(err, &de) {
		return ""
	}
	r, _ := de.Extra["reason"].(string)
	return r
}

func TestWebhookURLChecksNameTheRule(t *testing.T) {
	resolver := fakeResolver{
		"hooks.example.com":    {netip.MustParseAddr("93.184.216.34")},
		"internal.example.com": {netip.MustParseAddr("10.1.2.3")},
		"mixed.example.com":    {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("192.168.1.1")},
		"localhost":            {netip.MustParseAddr("127.0.0.1")},
	}
	tests := []struct {
		name     string
		url      string
		loopback bool
		reason   string // "" means accepted
	}{
		{"public https", "https://hooks.example.com/in", false, ""},
		{"public with port", "https://hooks.example.com:8443/in", false, ""},
		{"unresolvable name is accepted", "https://nowhere.example.com/in", false, ""},
		{"http", "http://hooks.example.com/in", false, URLSchemeNotHTTPS},
		{"no scheme", "hooks.example.com/in", false, URLNotAURL},
		{"garbage", "::not a url", false, URLNotAURL},
		{"empty", "", false, URLNotAURL},
		{"no host", "https:///in", false, URLNotAURL},
		{"credentials", "https://user:pw@hooks.example.com/in", false, URLHasCredentials},
		{"user only", "https://user@hooks.example.com/in", false, URLHasCredentials},
		{"too long", "https://hooks.example.com/" + strings.Repeat("a", 2000), false, URLTooLong},
		{"127.0.0.1", "https://127.0.0.1/in", false, URLPrivateAddress},
		{"localhost", "https://localhost/in", false, URLPrivateAddress},
		{"sub.localhost", "https://a.localhost/in", false, URLPrivateAddress},
		{"[::1]", "https://[::1]/in", false, URLPrivateAddress},
		{"[::ffff:127.0.0.1]", "https://[::ffff:127.0.0.1]/in", false, URLPrivateAddress},
		{"metadata 169.254.169.254", "https://169.254.169.254/latest", false, URLPrivateAddress},
		{"10/8", "https://10.0.0.1/in", false, URLPrivateAddress},
		{"172.16/12", "https://172.20.1.1/in", false, URLPrivateAddress},
		{"192.168/16", "https://192.168.0.10/in", false, URLPrivateAddress},
		{"fd00::/8", "https://[fd00::1]/in", false, URLPrivateAddress},
		{"0.0.0.0", "https://0.0.0.0/in", false, URLPrivateAddress},
		{"name resolving to 10/8", "https://internal.example.com/in", false, URLPrivateAddress},
		{"name with one private address", "https://mixed.example.com/in", false, URLPrivateAddress},
		{"loopback allowed in local mode", "https://127.0.0.1:8443/in", true, ""},
		{"localhost allowed in local mode", "https://localhost:8443/in", true, ""},
		{"[::1] allowed in local mode", "https://[::1]:8443/in", true, ""},
		{"10/8 refused even in local mode", "https://10.0.0.1/in", true, URLPrivateAddress},
		{"metadata refused even in local mode", "https://169.254.169.254/in", true, URLPrivateAddress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := AddressPolicy{AllowLoopback: tt.loopback}
			u, err := CheckWebhookURL(tt.url, p)
			if err == nil {
				err = CheckWebhookHost(context.Background(), u.Hostname(), p, resolver)
			}
			if got := reasonOf(err); got != tt.reason {
				t.Fatalf("got reason %q (%v); want %q", got, err, tt.reason)
			}
			if err != nil && ErrorCode(err) != CodeInvalidArgument {
				t.Fatalf("got code %s; want invalid_argument", ErrorCode(err))
			}
		})
	}
}

func TestSecretBoxSealsPerSubscription(t *testing.T) {
	key := make([]byte, 32)
	key[0] = 7
	box, err := NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	secret := NewWebhookSecret()
	if !strings.HasPrefix(secret, "whsec_") || len(secret) < 40 {
		t.Fatalf("got secret %q; want whsec_ and at least 256 bits", secret)
	}
	sealed := box.Seal("whk_a", secret)
	if strings.Contains(string(sealed), secret) {
		t.Fatal("the sealed secret contains the secret in clear")
	}
	if got, err := box.Open("whk_a", sealed); err != nil || got != secret {
		t.Fatalf("got %q (%v); want the secret back", got, err)
	}
	if _, err := box.Open("whk_b", sealed); !errors.Is(err, ErrSecretUnreadable) {
		t.Fatalf("got %v opening it for another subscription; want ErrSecretUnreadable", err)
	}
	other, _ := NewSecretBox(make([]byte, 32))
	if _, err := other.Open("whk_a", sealed); !errors.Is(err, ErrSecretUnreadable) {
		t.Fatalf("got %v opening it with another key; want ErrSecretUnreadable", err)
	}
	if got := SecretHint(secret); got != secret[len(secret)-4:] {
		t.Fatalf("got hint %q; want the last four characters", got)
	}
}

func applyAll(s *WebhookSet, evs []Event) {
	for _, e := range evs {
		s.Apply(e)
	}
}

func TestWebhookSetRules(t *testing.T) {
	person := Auth{OrgID: "org_1", Kind: PrincipalConsole, UserID: "u1", Scopes: []Scope{ScopeDevicesRead}}
	app := Auth{OrgID: "org_1", Kind: PrincipalApp, UserID: "u2", ClientID: "app-1", Scopes: []Scope{ScopeDevicesRead}}
	sameAppOtherPerson := Auth{OrgID: "org_1", Kind: PrincipalApp, UserID: "u3", ClientID: "app-1", Scopes: []Scope{ScopeDevicesRead}}
	otherOrg := Auth{OrgID: "org_2", Kind: PrincipalConsole, UserID: "u1"}
	s := NewWebhookSet("org_1")
	subscribe := func(a Auth, id string) {
		t.Helper()
		evs, err := s.Subscribe(a, id, "https://hooks.example.com", []string{WebhookRunEnded}, []byte{1}, "abcd")
		if err != nil {
			t.Fatal(err)
		}
		applyAll(s, evs)
	}
	subscribe(person, "whk_p")
	subscribe(app, "whk_a")

	t.Run("apps see only their own", func(t *testing.T) {
		if _, err := s.Get(app, "whk_p"); ErrorCode(err) != CodeNotFound {
			t.Errorf("got %v; want not_found for a webhook the app did not make", err)
		}
		if _, err := s.Get(sameAppOtherPerson, "whk_a"); ErrorCode(err) != CodeNotFound {
			t.Errorf("got %v; want not_found for the same app acting for another person", err)
		}
		if _, err := s.Get(app, "whk_a"); err != nil {
			t.Errorf("got %v; want the app to see its own webhook", err)
		}
		if _, err := s.Get(person, "whk_a"); err != nil {
			t.Errorf("got %v; want a console person to see every webhook", err)
		}
		if _, err := s.Get(otherOrg, "whk_p"); ErrorCode(err) != CodeNotFound {
			t.Errorf("got %v; want not_found for another organisation", err)
		}
	})
	t.Run("person left: only that person switches it on", func(t *testing.T) {
		evs := s.PersonLeft("u2")
		if len(evs) != 1 || evs[0].(WebhookDisabled).Reason != WebhookDisabledPersonLeft {
			t.Fatalf("got %+v; want whk_a switched off with reason person_left", evs)
		}
		applyAll(s, evs)
		if _, err := s.SetEnabled(person, "whk_a", true); ErrorCode(err) != CodePermissionDenied {
			t.Errorf("got %v from another person; want permission_denied", err)
		}
		evs, err := s.SetEnabled(app, "whk_a", true)
		if err != nil || len(evs) != 1 {
			t.Fatalf("got %v, %v from the person; want it switched on", evs, err)
		}
	})
	t.Run("at most 20 per organisation", func(t *testing.T) {
		for s.Count() < MaxWebhooksPerOrg {
			subscribe(person, NewID(PrefixWebhook))
		}
		_, err := s.Subscribe(app, "whk_21", "https://hooks.example.com", []string{WebhookRunEnded}, nil, "")
		if reasonOf(err) != "too_many_webhooks" {
			t.Fatalf("got %v; want invalid_argument reason too_many_webhooks", err)
		}
	})
	t.Run("unknown event names are refused", func(t *testing.T) {
		_, err := CheckWebhookEvents([]string{"run.ended", "run.started"})
		if reasonOf(err) != "unknown_event" {
			t.Fatalf("got %v; want reason unknown_event", err)
		}
		got, err := CheckWebhookEvents([]string{"fulfilment.changed", "run.ended", "run.ended"})
		if err != nil || strings.Join(got, ",") != "run.ended,fulfilment.changed" {
			t.Fatalf("got %v (%v); want deduplicated in spec order", got, err)
		}
	})
}

func TestTestRequestBecomesRunEndedWithEveryField(t *testing.T) {
	src, ok := WebhookSourceFor(WebhookTestRequested{}.EventName())
	if !ok || src.Event != WebhookRunEnded {
		t.Fatalf("got %+v, %v; want webhook.test_requested mapped to run.ended", src, ok)
	}
	data, target, ok := src.Build(WebhookTestRequested{WebhookID: "whk_1", AgentRunID: "arun_1", RunID: "run_1"})
	if !ok || target != "whk_1" {
		t.Fatalf("got target %q, %v; want the one subscription", target, ok)
	}
	for _, f := range []string{"agentRunId", "runId", "deviceId", "state", "goal", "stepSeq", "reason", "detail"} {
		if _, ok := data[f]; !ok {
			t.Errorf("run.ended data lacks %s", f)
		}
	}
	if data["test"] != true {
		t.Errorf("got data.test %v; want true", data["test"])
	}
	body, err := EncodeWebhookBody("dlv_1", src.Event, time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), data)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"deliveryId":"dlv_1","event":"run.ended","occurredAt":"2026-01-02T03:04:05.000006Z","data":{"agentRunId":"arun_1","detail":null,"deviceId":null,"goal":"Test delivery from phonefleet","reason":null,"runId":"run_1","state":"succeeded","stepSeq":0,"test":true}}`
	if string(body) != want {
		t.Fatalf("got body\n%s\nwant\n%s", body, want)
	}
}
