package domain

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func codeOf(err error) Code {
	if err == nil {
		return ""
	}
	return ErrorCode(err)
}

func session(role string) Auth {
	a := LocalOperator("org_a")
	a.Kind, a.UserID, a.Role = PrincipalConsole, "user_"+role, role
	if role == RoleMember {
		a.Scopes = slices.DeleteFunc(slices.Clone(a.Scopes), func(s Scope) bool { return s == ScopeOrdersPlace || s == ScopeAppsDelete })
	}
	return a
}

func mintedKey(t *testing.T, by Auth, scopes []Scope, devices []string, now time.Time) APIKey {
	t.Helper()
	ev, err := MintAPIKey(by, MintAPIKeyInput{KeyID: NewID(PrefixAPIKey), Scopes: scopes, DeviceIDs: devices,
		SecretHash: []byte("h1"), Instance: "https://iss"}, now)
	if err != nil {
		t.Fatal(err)
	}
	var k APIKey
	k.Apply(ev)
	return k
}

func TestMintAPIKey(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dev := NewID(PrefixDevice)
	key := NewID(PrefixAPIKey)
	tests := []struct {
		name string
		by   Auth
		in   MintAPIKeyInput
		code Code
	}{
		{name: "member, its own scopes", by: session(RoleMember), in: MintAPIKeyInput{Scopes: []Scope{ScopeDevicesRead}}},
		{name: "member, an admin scope", by: session(RoleMember), in: MintAPIKeyInput{Scopes: []Scope{ScopeOrdersPlace}}, code: CodePermissionDenied},
		{name: "admin, every scope", by: session(RoleAdmin), in: MintAPIKeyInput{Scopes: AllScopes}},
		{name: "no scopes", by: session(RoleAdmin), in: MintAPIKeyInput{}, code: CodeInvalidArgument},
		{name: "unknown scope", by: session(RoleAdmin), in: MintAPIKeyInput{Scopes: []Scope{"devices:fly"}}, code: CodeInvalidArgument},
		{name: "device subset", by: session(RoleAdmin), in: MintAPIKeyInput{Scopes: []Scope{ScopeDevicesRead}, DeviceIDs: []string{dev, dev}}},
		{name: "bad device id", by: session(RoleAdmin), in: MintAPIKeyInput{Scopes: []Scope{ScopeDevicesRead}, DeviceIDs: []string{"x"}}, code: CodeInvalidArgument},
		{name: "lifetime too long", by: session(RoleAdmin), in: MintAPIKeyInput{Scopes: []Scope{ScopeDevicesRead}, Lifetime: 400 * 24 * time.Hour}, code: CodeInvalidArgument},
		{name: "by an API key", by: Auth{OrgID: "org_a", Kind: PrincipalAPIKey, Scopes: AllScopes}, in: MintAPIKeyInput{Scopes: []Scope{ScopeDevicesRead}}, code: CodePermissionDenied},
		{name: "by an OAuth app", by: Auth{OrgID: "org_a", Kind: PrincipalApp, Scopes: AllScopes}, in: MintAPIKeyInput{Scopes: []Scope{ScopeDevicesRead}}, code: CodePermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.KeyID, tt.in.SecretHash = key, []byte("h")
			ev, err := MintAPIKey(tt.by, tt.in, now)
			if got := codeOf(err); got != tt.code {
				t.Fatalf("got %v; want code %q", err, tt.code)
			}
			if err != nil {
				return
			}
			if ev.OrgID != "org_a" || ev.MintedBy != tt.by.UserID || ev.MintedByRole != tt.by.Role || !ev.ExpiresAt.Equal(now.Add(DefaultAPIKeyLifetime)) {
				t.Fatalf("got %+v; want a key of org_a minted by %s expiring after the default lifetime", ev, tt.by.UserID)
			}
			if tt.in.DeviceIDs == nil && ev.DeviceIDs != nil {
				t.Fatalf("got devices %v; want nil (every device)", ev.DeviceIDs)
			}
			if tt.in.DeviceIDs != nil && !slices.Equal(ev.DeviceIDs, []string{dev}) {
				t.Fatalf("got devices %v; want [%s] without duplicates", ev.DeviceIDs, dev)
			}
		})
	}
}

func TestAPIKeyChanges(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	admin, member := session(RoleAdmin), session(RoleMember)
	other := member
	other.UserID = "user_other"
	foreign := admin
	foreign.OrgID = "org_b"
	d1, d2 := NewID(PrefixDevice), NewID(PrefixDevice)

	t.Run("who may manage", func(t *testing.T) {
		k := mintedKey(t, member, []Scope{ScopeDevicesRead}, nil, now)
		for _, tt := range []struct {
			name string
			by   Auth
			ok   bool
		}{{"minter", member, true}, {"admin", admin, true}, {"another member", other, false}, {"another organisation's admin", foreign, false}} {
			_, err := k.Renew(tt.by, 0, now)
			if (err == nil) != tt.ok {
				t.Errorf("%s: got %v; want allowed=%v", tt.name, err, tt.ok)
			}
			if !tt.ok && codeOf(err) != CodeNotFound {
				t.Errorf("%s: got %v; want not_found", tt.name, err)
			}
		}
	})
	t.Run("narrow never widens", func(t *testing.T) {
		k := mintedKey(t, admin, []Scope{ScopeDevicesRead, ScopeDevicesAct}, []string{d1}, now)
		tests := []struct {
			name    string
			scopes  []Scope
			devices []string
			code    Code
		}{
			{"fewer scopes", []Scope{ScopeDevicesRead}, nil, ""},
			{"a new scope", []Scope{ScopeRunsStart}, nil, CodeInvalidArgument},
			{"no scopes", []Scope{}, nil, CodeInvalidArgument},
			{"same device", nil, []string{d1}, ""},
			{"another device", nil, []string{d2}, CodeInvalidArgument},
			{"no devices", nil, []string{}, CodeInvalidArgument},
			{"nothing", nil, nil, CodeInvalidArgument},
		}
		for _, tt := range tests {
			ev, err := k.Narrow(admin, tt.scopes, tt.devices, now)
			if codeOf(err) != tt.code {
				t.Errorf("%s: got %v; want %q", tt.name, err, tt.code)
			}
			if err == nil && tt.devices == nil && !slices.Equal(ev.DeviceIDs, []string{d1}) {
				t.Errorf("%s: got devices %v; want them unchanged", tt.name, ev.DeviceIDs)
			}
		}
		all := mintedKey(t, admin, []Scope{ScopeDevicesRead}, nil, now)
		if _, err := all.Narrow(admin, nil, []string{d2}, now); err != nil {
			t.Errorf("narrowing a key of every device to one: %v", err)
		}
	})
	t.Run("rotate keeps the old secret for the grace window", func(t *testing.T) {
		k := mintedKey(t, admin, []Scope{ScopeDevicesRead}, nil, now)
		ev, err := k.Rotate(admin, []byte("h2"), 24*time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		if string(ev.PreviousHash) != "h1" || string(ev.SecretHash) != "h2" || !ev.PreviousValidUntil.Equal(now.Add(24*time.Hour)) {
			t.Fatalf("got %+v; want h2 current, h1 valid for 24 h", ev)
		}
	})
	t.Run("rotation attributes a key without an instance", func(t *testing.T) {
		k := mintedKey(t, admin, []Scope{ScopeDevicesRead}, nil, now)
		k.Instance = ""
		by := admin
		by.Instance = "https://now"
		ev, _ := k.Rotate(by, []byte("h2"), 0, now)
		if ev.Instance != "https://now" {
			t.Fatalf("got instance %q; want the rotating session's", ev.Instance)
		}
	})
	t.Run("revoked and expired keys are not changed", func(t *testing.T) {
		k := mintedKey(t, admin, []Scope{ScopeDevicesRead}, nil, now)
		later := now.Add(DefaultAPIKeyLifetime)
		if _, err := k.Renew(admin, 0, later); codeOf(err) != CodeInvalidArgument {
			t.Fatalf("renew an expired key: got %v; want invalid_argument (state expired)", err)
		}
		ev, ok, err := k.Revoke(admin, now)
		if err != nil || !ok {
			t.Fatal(err)
		}
		k.Apply(ev)
		if _, err := k.Rotate(admin, []byte("x"), 0, now); codeOf(err) != CodeInvalidArgument {
			t.Fatalf("rotate a revoked key: got %v; want invalid_argument (state revoked)", err)
		}
		if _, ok, err := k.Revoke(admin, now); ok || err != nil {
			t.Fatalf("revoke twice: got (%v, %v); want nothing to record and no error", ok, err)
		}
		if k.State(now) != KeyStateRevoked {
			t.Fatalf("got state %s; want revoked", k.State(now))
		}
	})
}

func TestOwned(t *testing.T) {
	a := Auth{OrgID: "org_a", Devices: []string{"dev_1"}}
	missing := func() *Error { return NotFound("nothing here") }
	tests := []struct {
		name   string
		org    string
		device string
		found  bool
		ok     bool
	}{
		{"own", "org_a", "dev_1", true, true},
		{"missing", "", "", false, false},
		{"another organisation's", "org_b", "dev_1", true, false},
		{"outside the device subset", "org_a", "dev_2", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := a.OwnedDevice(tt.org, tt.device, tt.found, missing)
			if (err == nil) != tt.ok {
				t.Fatalf("got %v; want ok=%v", err, tt.ok)
			}
			if err != nil {
				var de *Error
				if !errors.As(err, &de) || de.Code != CodeNotFound || de.Message != "nothing here" {
					t.Fatalf("got %v; want exactly the missing answer", err)
				}
			}
		})
	}
}

func TestDenyAppAndRequireSession(t *testing.T) {
	tests := []struct {
		kind    PrincipalKind
		deny    bool
		session bool
	}{
		{PrincipalConsole, false, true},
		{PrincipalLocalOperator, false, true},
		{PrincipalApp, true, false},
		{PrincipalAPIKey, false, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			a := Auth{Kind: tt.kind}
			if err := a.DenyApp("billing", "the console"); (err != nil) != tt.deny {
				t.Fatalf("DenyApp: got %v; want denied=%v", err, tt.deny)
			} else if err != nil && codeOf(err) != CodePermissionDenied {
				t.Fatalf("DenyApp: got %v; want permission_denied", err)
			}
			if err := a.RequireSession("API keys"); (err == nil) != tt.session {
				t.Fatalf("RequireSession: got %v; want allowed=%v", err, tt.session)
			}
		})
	}
}
