package claims

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Attempt claims (domain.AttemptClaim): the session lock a process holds
// while it runs one attempt that asks the payment provider for a page (a
// checkout attempt, a managed proxy order), so a repeat of the attempt's
// Idempotency-Key can tell an attempt being run from one whose process
// died. Each claim is held on a connection of its own, outside the pool:
// closing the connection releases the lock, and a process that dies
// releases it with its connection (kill -9 closes its sockets at once).
// Keepalives are asked of the server on that connection, so a machine
// that vanished without closing it is noticed within about half a minute
// rather than the operating system's two hours.

// ErrAttemptHeld is HoldAttempt's answer when another process holds the
// claim: the attempt is being run there.
var ErrAttemptHeld = errors.New("claims: another process runs this attempt")

// attemptKeepalive is what the server is asked on an attempt claim's
// connection: a probe after 10 s of silence, every 5 s, 3 unanswered
// dropping it (and the claim with it).
var attemptKeepalive = map[string]string{"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5",
	"tcp_keepalives_count": "3"}

// attemptTimeout bounds the statements on a claim's connection.
const attemptTimeout = 10 * time.Second

// Attempt is one attempt claim this process holds.
type Attempt struct {
	conn *pgx.Conn
	// Name is the claim's name (domain.AttemptClaim).
	Name string
}

// HoldAttempt takes the claim name on a new connection to pool's database
// and holds it until Release. Errors: ErrAttemptHeld when another process
// holds it; otherwise the database's (nothing is held then).
func HoldAttempt(ctx context.Context, pool *pgxpool.Pool, name string) (*Attempt, error) {
	cfg := pool.Config().ConnConfig.Copy()
	for k, v := range attemptKeepalive {
		cfg.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT claim_try_lock($1)`, name).Scan(&got); err != nil || !got {
		_ = conn.Close(ctx)
		if err == nil {
			err = ErrAttemptHeld
		}
		return nil, err
	}
	return &Attempt{conn: conn, Name: name}, nil
}

// Release gives the claim back by closing its connection. Releasing nil
// (no claim) does nothing.
func (a *Attempt) Release() {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	_ = a.conn.Close(ctx)
}

// AttemptsHeld reads which of the claims names are held now (by any
// process), in one statement: the map has every name.
func AttemptsHeld(ctx context.Context, pool *pgxpool.Pool, names []string) (map[string]bool, error) {
	held := make(map[string]bool, len(names))
	if len(names) == 0 {
		return held, nil
	}
	rows, err := pool.Query(ctx, `SELECT n, claim_held(n) FROM unnest($1::text[]) AS n`, names)
	if err != nil {
		return nil, err
	}
	var name string
	var h bool
	_, err = pgx.ForEachRow(rows, []any{&name, &h}, func() error {
		held[name] = h
		return nil
	})
	return held, err
}
