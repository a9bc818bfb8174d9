package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

func appendKeyEvent(t *testing.T, s *eventstore.Store, keyID string, ev domain.Event) eventstore.Appended {
	t.Helper()
	name, version, data, err := domain.Events.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Append(testutil.Context(t), domain.APIKeyStream(keyID), eventstore.AnyVersion,
		eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: "org_a", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// keyRows dumps the key store as text, row by row.
func keyRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(testutil.Context(t), `SELECT k::text FROM api_keys k ORDER BY key_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestAPIKeysRebuildsToTheSameRows applies every key event, rebuilds the
// projection from position 0, and expects the same rows, and the reader's
// tenancy rules to hold.
func TestAPIKeysRebuildsToTheSameRows(t *testing.T) {
	pool := testutil.SmallPool(t, 6)
	s := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r, err := projections.NewRunner(s, quiet, []projections.Projection{projections.APIKeys{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var last eventstore.Appended
	var ids []string
	for i := 0; i < 5; i++ {
		id := domain.NewID(domain.PrefixAPIKey)
		ids = append(ids, id)
		by := "user_1"
		if i%2 == 1 {
			by = "user_2"
		}
		var devices []string
		if i == 3 {
			devices = []string{domain.NewID(domain.PrefixDevice)}
		}
		last = appendKeyEvent(t, s, id, domain.APIKeyMinted{KeyID: id, OrgID: "org_a", Name: fmt.Sprint("k", i),
			Scopes: []domain.Scope{domain.ScopeDevicesRead, domain.ScopeDevicesAct}, DeviceIDs: devices, MintedBy: by,
			MintedByRole: domain.RoleMember, Instance: "https://iss", SecretHash: []byte{byte(i)}, MintedAt: now.Add(time.Duration(i) * time.Minute),
			ExpiresAt: now.Add(24 * time.Hour)})
	}
	appendKeyEvent(t, s, ids[0], domain.APIKeyRotated{KeyID: ids[0], OrgID: "org_a", SecretHash: []byte{9}, PreviousHash: []byte{0},
		PreviousValidUntil: now.Add(time.Hour), RotatedAt: now, Instance: "https://iss"})
	appendKeyEvent(t, s, ids[1], domain.APIKeyRenewed{KeyID: ids[1], OrgID: "org_a", ExpiresAt: now.Add(48 * time.Hour), RenewedAt: now})
	appendKeyEvent(t, s, ids[2], domain.APIKeyNarrowed{KeyID: ids[2], OrgID: "org_a", Scopes: []domain.Scope{domain.ScopeDevicesRead}, NarrowedAt: now})
	last = appendKeyEvent(t, s, ids[4], domain.APIKeyRevoked{KeyID: ids[4], OrgID: "org_a", RevokedAt: now})
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := r.WaitFor(wctx, projections.APIKeysName, last); err != nil {
		t.Fatal(err)
	}
	before := keyRows(t, pool)
	if len(before) != 5 {
		t.Fatalf("got %d rows; want 5", len(before))
	}
	if err := r.Rebuild(wctx, projections.APIKeysName, nil); err != nil {
		t.Fatal(err)
	}
	after := keyRows(t, pool)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("rebuild changed the key store:\nbefore %v\nafter  %v", before, after)
	}

	reader := projections.APIKeyReader{DB: pool}
	t.Run("reader tenancy", func(t *testing.T) {
		member := domain.Auth{OrgID: "org_a", UserID: "user_1", Role: domain.RoleMember}
		list, err := reader.List(ctx, member)
		if err != nil || len(list) != 3 {
			t.Fatalf("member list: got %d keys (%v); want the 3 it minted", len(list), err)
		}
		if _, err := reader.Get(ctx, member, ids[1]); domain.ErrorCode(err) != domain.CodeNotFound {
			t.Fatalf("member reading another's key: got %v; want not_found", err)
		}
		admin := domain.Auth{OrgID: "org_a", UserID: "user_9", Role: domain.RoleAdmin}
		if list, _ := reader.List(ctx, admin); len(list) != 5 {
			t.Fatalf("admin list: got %d keys; want 5", len(list))
		}
		foreign := domain.Auth{OrgID: "org_b", UserID: "user_1", Role: domain.RoleAdmin}
		if list, _ := reader.List(ctx, foreign); len(list) != 0 {
			t.Fatalf("another organisation's list: got %d keys; want 0", len(list))
		}
		_, errForeign := reader.Get(ctx, foreign, ids[0])
		_, errMissing := reader.Get(ctx, foreign, domain.NewID(domain.PrefixAPIKey))
		if errForeign == nil || errForeign.Error() != errMissing.Error() {
			t.Fatalf("got %v for another organisation's key and %v for a missing one; want one answer", errForeign, errMissing)
		}
		rec, found, err := reader.Lookup(ctx, ids[3])
		if err != nil || !found || len(rec.DeviceIDs) != 1 {
			t.Fatalf("lookup: got %+v, %v, %v; want the key with its one device", rec, found, err)
		}
		if rec, _, _ := reader.Lookup(ctx, ids[1]); rec.DeviceIDs != nil {
			t.Fatalf("got devices %v; want nil for a key of every device", rec.DeviceIDs)
		}
	})
}
