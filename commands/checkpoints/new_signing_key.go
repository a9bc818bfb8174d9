package checkpoints

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/receiptchain"
)

// A checkpoint signed with a key and a rotation retiring that key are
// serialised by one advisory lock: a signature holds it shared while it
// commits, a rotation exclusively, so that a rotation sees every
// checkpoint the old key signed before it commits.
const (
	signingLock   = `SELECT pg_advisory_xact_lock_shared(hashtext('` + domain.ReceiptSigningKeysStream + `'))`
	rotationLock  = `SELECT pg_advisory_xact_lock(hashtext('` + domain.ReceiptSigningKeysStream + `'))`
	rotationCheck = `SELECT eventstore_expect($1, CASE WHEN EXISTS (SELECT 1 FROM events
		WHERE event_type = 'receipt.checkpoint_signed' AND data->'checkpoint'->>'keyId' = $2
			AND data->'checkpoint'->>'signedAt' > $3) THEN -1::bigint ELSE $4::bigint END)`
	lastSignedBy = `SELECT coalesce(max(data->'checkpoint'->>'signedAt'), '') FROM events
		WHERE event_type = 'receipt.checkpoint_signed' AND data->'checkpoint'->>'keyId' = $1`
)

// newKey returns the event of a new signing key after the keys s (the
// first, or the next one), valid from now and strictly after the active
// key's last signature. For a rotation it adds to u what makes that hold
// at commit: it takes the keys' lock, then fails (signedMeanwhile) if a
// checkpoint signed by the active key after the new key's start
// committed in between (a signer whose clock is ahead of this one).
func (c *Checkpoints) newKey(ctx context.Context, s *domain.SigningKeys, u *eventstore.Unit) ([]domain.Event, error) {
	var last time.Time
	active, rotating := s.Active()
	if rotating {
		var at string
		if err := c.Pool.QueryRow(ctx, lastSignedBy, active.KeyID).Scan(&at); err != nil {
			return nil, err
		}
		if at != "" {
			t, err := time.Parse(time.RFC3339Nano, at)
			if err != nil {
				return nil, err
			}
			last = t
		}
	}
	g, err := s.Generate(c.Box, c.now(), last)
	if err != nil {
		return nil, err
	}
	if rotating {
		from := g.ValidFrom.UTC().Format(receiptchain.TimeLayout)
		u.Exec(rotationLock).Exec(rotationCheck, domain.ReceiptSigningKeysStream, active.KeyID, from, int64(len(s.Keys)+1))
	}
	return []domain.Event{g}, nil
}

// signedMeanwhile reports whether a rotation's unit failed its check: a
// checkpoint of the old key signed after the new key's start committed
// while the rotation was decided. The rotation is then decided again.
func signedMeanwhile(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "PF409"
}
