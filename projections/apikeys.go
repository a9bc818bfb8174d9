package projections

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// APIKeys is the key store: one row per organisation API key, built from the
// api_key.* events (minted, rotated, renewed, narrowed, revoked). It is what
// every request carrying a key is verified against and what the key
// management routes read. It emits nothing. Key commands wait for it
// (Runner.WaitFor(ctx, APIKeysName, appended)) before answering, so a revoked
// key is refused from its next request.
type APIKeys struct{}

// APIKeysName is the projection's stable name.
const APIKeysName = "api_keys"

// Name implements Projection.
func (APIKeys) Name() string { return APIKeysName }

// Tables implements Projection.
func (APIKeys) Tables() []string { return []string{"api_keys"} }

// Setup implements Projection.
func (APIKeys) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+schema+`.api_keys (
		key_id               text PRIMARY KEY,
		org_id               text NOT NULL,
		name                 text NOT NULL,
		scopes               text[] NOT NULL,
		device_ids           text[],
		minted_by            text NOT NULL,
		minted_by_role       text NOT NULL,
		instance             text NOT NULL,
		secret_hash          bytea NOT NULL,
		previous_hash        bytea,
		previous_valid_until timestamptz,
		minted_at            timestamptz NOT NULL,
		expires_at           timestamptz NOT NULL,
		rotated_at           timestamptz,
		renewed_at           timestamptz,
		narrowed_at          timestamptz,
		revoked_at           timestamptz,
		stream_version       bigint NOT NULL,
		position             bigint NOT NULL
	);
	CREATE INDEX ON `+schema+`.api_keys (org_id, minted_at);`)
	return err
}

// Apply implements Projection. Each api_key.* event becomes one statement,
// sent in one pipelined batch; other events are skipped.
func (APIKeys) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	t := schema + ".api_keys"
	var b pgx.Batch
	for _, e := range events {
		if !strings.HasPrefix(e.Type, "api_key.") {
			continue
		}
		ev, err := decodeEvent(ctx, e)
		if err != nil {
			return fmt.Errorf("api_keys: event %d: %w", e.Position, err)
		}
		switch ev := ev.(type) {
		case domain.APIKeyMinted:
			b.Queue(`INSERT INTO `+t+` (key_id, org_id, name, scopes, device_ids, minted_by, minted_by_role, instance,
				secret_hash, minted_at, expires_at, stream_version, position)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
				ev.KeyID, ev.OrgID, ev.Name, scopeStrings(ev.Scopes), ev.DeviceIDs, ev.MintedBy, ev.MintedByRole,
				ev.Instance, ev.SecretHash, ev.MintedAt, ev.ExpiresAt, e.StreamVersion, e.Position)
		case domain.APIKeyRotated:
			b.Queue(`UPDATE `+t+` SET secret_hash = $2, previous_hash = $3, previous_valid_until = $4, rotated_at = $5,
				instance = $6, stream_version = $7, position = $8 WHERE key_id = $1`,
				ev.KeyID, ev.SecretHash, ev.PreviousHash, ev.PreviousValidUntil, ev.RotatedAt, ev.Instance, e.StreamVersion, e.Position)
		case domain.APIKeyRenewed:
			b.Queue(`UPDATE `+t+` SET expires_at = $2, renewed_at = $3, stream_version = $4, position = $5 WHERE key_id = $1`,
				ev.KeyID, ev.ExpiresAt, ev.RenewedAt, e.StreamVersion, e.Position)
		case domain.APIKeyNarrowed:
			b.Queue(`UPDATE `+t+` SET scopes = $2, device_ids = $3, narrowed_at = $4, stream_version = $5, position = $6 WHERE key_id = $1`,
				ev.KeyID, scopeStrings(ev.Scopes), ev.DeviceIDs, ev.NarrowedAt, e.StreamVersion, e.Position)
		case domain.APIKeyRevoked:
			b.Queue(`UPDATE `+t+` SET revoked_at = $2, stream_version = $3, position = $4 WHERE key_id = $1`,
				ev.KeyID, ev.RevokedAt, e.StreamVersion, e.Position)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, &b).Close()
}

func scopeStrings(s []domain.Scope) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return out
}

// APIKeyReader reads the key store through its public view.
type APIKeyReader struct {
	DB eventstore.DB
}

const apiKeyColumns = `key_id, org_id, name, scopes, device_ids, minted_by, minted_by_role, instance, secret_hash,
	previous_hash, previous_valid_until, minted_at, expires_at, rotated_at, renewed_at, narrowed_at, revoked_at`

func scanAPIKey(row pgx.Row) (domain.APIKeyRecord, error) {
	var k domain.APIKeyRecord
	var scopes []string
	var prevUntil, rotated, renewed, narrowed, revoked *time.Time
	err := row.Scan(&k.ID, &k.OrgID, &k.Name, &scopes, &k.DeviceIDs, &k.MintedBy, &k.MintedByRole, &k.Instance,
		&k.SecretHash, &k.PreviousHash, &prevUntil, &k.MintedAt, &k.ExpiresAt, &rotated, &renewed, &narrowed, &revoked)
	if err != nil {
		return k, err
	}
	k.Scopes = make([]domain.Scope, len(scopes))
	for i, s := range scopes {
		k.Scopes[i] = domain.Scope(s)
	}
	for _, p := range []struct {
		src *time.Time
		dst *time.Time
	}{{prevUntil, &k.PreviousValidUntil}, {rotated, &k.RotatedAt}, {renewed, &k.RenewedAt}, {narrowed, &k.NarrowedAt}, {revoked, &k.RevokedAt}} {
		if p.src != nil {
			*p.dst = *p.src
		}
	}
	return k, nil
}

// Lookup returns the key with id keyID for verification, whatever its
// organisation (the key names its organisation). found is false for an id
// that names no key.
func (r APIKeyReader) Lookup(ctx context.Context, keyID string) (k domain.APIKeyRecord, found bool, err error) {
	k, err = scanAPIKey(r.DB.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM public.api_keys WHERE key_id = $1`, keyID))
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.APIKeyRecord{}, false, nil
	}
	return k, err == nil, err
}

// Get returns the key keyID if a may manage it: it belongs to a's
// organisation and, for a member, was minted by a. Anything else is
// domain.APIKeyNotFound, the same answer as for an id that names nothing.
func (r APIKeyReader) Get(ctx context.Context, a domain.Auth, keyID string) (domain.APIKeyRecord, error) {
	k, err := scanAPIKey(r.DB.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM public.api_keys
		WHERE org_id = $1 AND key_id = $2 AND ($3 = '' OR minted_by = $3)`, a.OrgID, keyID, memberFilter(a)))
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return domain.APIKeyRecord{}, err
	}
	if err := a.Owned(k.OrgID, found, domain.APIKeyNotFound); err != nil {
		return domain.APIKeyRecord{}, err
	}
	return k, nil
}

// List returns the keys a may manage, newest first: every key of the
// organisation for an admin, the keys they minted for a member.
func (r APIKeyReader) List(ctx context.Context, a domain.Auth) ([]domain.APIKeyRecord, error) {
	rows, err := r.DB.Query(ctx, `SELECT `+apiKeyColumns+` FROM public.api_keys
		WHERE org_id = $1 AND ($2 = '' OR minted_by = $2) ORDER BY minted_at DESC, key_id DESC`, a.OrgID, memberFilter(a))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []domain.APIKeyRecord{}
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// memberFilter is the minter a member is limited to; "" for an admin. (A
// member always has a subject: the authenticator refuses tokens without.)
func memberFilter(a domain.Auth) string {
	if a.Role == domain.RoleAdmin {
		return ""
	}
	return a.UserID
}
