package backends

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
)

// ErrHeld is the error of GatewayClaims.Take when another process holds
// the gateway's claim (its tunnel ends there).
var ErrHeld = errors.New("another instance of the service holds this gateway")

// gatewayLockPrefix prefixes a host key to name its advisory lock (as
// simHostLock names the sim host's).
const gatewayLockPrefix = "phonefleet:"

// claimTimeout bounds each statement on the claims' connection. A
// statement cut short takes the connection down with it, and every lock
// on it, so a caller's own deadline never cuts one: only a database that
// stops answering does.
const claimTimeout = 10 * time.Second

// GatewayClaims holds this process's host claims on gateways: a gateway's
// devices are driven only by the process holding its claim, the one its
// tunnel ends at. Each claim is an advisory lock (claim_try_lock of
// "phonefleet:gw.<gatewayId>": a key of its own from table advisory_keys,
// migration 0012), all held on one connection of its own,
// outside the pool; table gateway_hosts counts the takes of each gateway
// (its epoch), so a process re-taking a gateway learns whether another one
// drove it meanwhile. It implements internal/devices.HostSet.
//
// The locks live as long as their connection: when it is lost (the
// database restarted, the network dropped) every claim is gone at once,
// and Check reports it. A process that dies releases its claims with its
// connection.
type GatewayClaims struct {
	pool *pgxpool.Pool
	// id names this process in table gateway_hosts.
	id string

	// mu guards the lock connection and the epochs; the database work
	// happens under it.
	mu   sync.Mutex
	conn *pgx.Conn
	// checked is when Check last found the connection alive.
	checked time.Time
	// epochs is the gateway_hosts epoch of this process's last take of each
	// gateway, kept after a release: a later take that finds it unchanged
	// follows this process's own.
	epochs map[string]int64
	// since is the epoch each gateway's unbroken hold by this process
	// began with (domain.HostFence).
	since map[string]int64

	// heldMu guards held alone, so that Holds never waits for the
	// database.
	heldMu sync.RWMutex
	held   map[string]bool
}

// NewGatewayClaims returns claims over pool that hold nothing until Take.
func NewGatewayClaims(pool *pgxpool.Pool) *GatewayClaims {
	return &GatewayClaims{pool: pool, id: uuid.Must(uuid.NewV7()).String(), epochs: map[string]int64{}, since: map[string]int64{}, held: map[string]bool{}}
}

// Take takes the claim on gateway gatewayID, or keeps it if this process
// holds it already (then tookOver is false). tookOver reports that another
// process — or one this process does not know, such as its own earlier
// life — may have driven the gateway's devices since this process last
// did, so the actions left unfinished under its host must be settled
// before anything else runs there. Errors: ErrHeld when another process
// holds the claim; otherwise the database's (nothing is held then).
func (c *GatewayClaims) Take(ctx context.Context, gatewayID string) (tookOver bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds(gatewayID) {
		return false, nil
	}
	if c.conn != nil && c.conn.IsClosed() {
		c.dropLocked()
	}
	if c.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
		if err != nil {
			return false, err
		}
		c.conn = conn
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	lock := gatewayLockPrefix + domain.GatewayHostKey(gatewayID)
	var got bool
	if err := c.conn.QueryRow(qctx, `SELECT claim_try_lock($1)`, lock).Scan(&got); err != nil {
		c.dropIfClosed()
		return false, err
	}
	if !got {
		return false, ErrHeld
	}
	var epoch, prevEpoch int64
	var prevHolder string
	err = c.conn.QueryRow(qctx, `WITH prev AS (SELECT holder, epoch FROM gateway_hosts WHERE gateway_id = $1)
		INSERT INTO gateway_hosts (gateway_id, holder, epoch, taken_at) VALUES ($1, $2, 1, now())
		ON CONFLICT (gateway_id) DO UPDATE SET holder = excluded.holder, epoch = gateway_hosts.epoch + 1, taken_at = now()
		RETURNING epoch, coalesce((SELECT holder FROM prev), ''), coalesce((SELECT epoch FROM prev), 0)`, gatewayID, c.id).
		Scan(&epoch, &prevHolder, &prevEpoch)
	if err != nil {
		if _, uerr := c.conn.Exec(qctx, `SELECT claim_unlock($1)`, lock); uerr != nil {
			c.dropIfClosed()
		}
		return false, err
	}
	last, known := c.epochs[gatewayID]
	continuous := known && prevHolder == c.id && prevEpoch == last
	c.epochs[gatewayID] = epoch
	if !continuous {
		c.since[gatewayID] = epoch
	}
	c.heldMu.Lock()
	c.held[gatewayID] = true
	c.heldMu.Unlock()
	return !continuous, nil
}

// Holder returns the process recorded as the holder of gateway
// gatewayID's claim (table gateway_hosts): this process's id while it
// holds the claim, as recorded for the tunnel it serves. Errors are the
// database's (pgx.ErrNoRows for a gateway never taken).
func (c *GatewayClaims) Holder(ctx context.Context, gatewayID string) (string, error) {
	var id string
	err := c.pool.QueryRow(ctx, `SELECT holder FROM gateway_hosts WHERE gateway_id = $1`, gatewayID).Scan(&id)
	return id, err
}

// Release gives the claim on gatewayID back; it does nothing when this
// process does not hold it.
func (c *GatewayClaims) Release(gatewayID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holds(gatewayID) {
		return
	}
	c.heldMu.Lock()
	delete(c.held, gatewayID)
	c.heldMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	lock := gatewayLockPrefix + domain.GatewayHostKey(gatewayID)
	if _, err := c.conn.Exec(ctx, `SELECT claim_unlock($1)`, lock); err != nil {
		// Not given back: the lock is gone with its connection, or the
		// connection must go to give it back.
		c.dropLocked()
	}
}

// checkEvery is how long Check trusts a connection it found alive: every
// tunnel's watch calls Check, and one ping a second answers them all.
const checkEvery = time.Second

// Check makes sure the claims' connection is alive (a ping, at most once
// a second). When it is lost, every claim is dropped (Held is empty
// afterwards) and the error says why; the caller stops serving those
// gateways. It does nothing while there is no connection.
func (c *GatewayClaims) Check(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	if c.conn.IsClosed() {
		c.dropLocked()
		return errors.New("backends: the gateway claims' connection is closed")
	}
	if time.Since(c.checked) < checkEvery {
		return nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	if err := c.conn.Ping(pctx); err != nil {
		c.dropLocked()
		return err
	}
	c.checked = time.Now()
	return nil
}

// Close releases every claim and closes the connection (at shutdown).
func (c *GatewayClaims) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked()
}

// dropLocked forgets every claim and closes the connection, which frees
// the locks still on it. c.mu is held.
func (c *GatewayClaims) dropLocked() {
	c.heldMu.Lock()
	clear(c.held)
	c.heldMu.Unlock()
	if c.conn != nil {
		_ = c.conn.Close(context.Background())
		c.conn = nil
	}
}

// dropIfClosed drops every claim when a failed statement took the
// connection down (its locks went with it). c.mu is held.
func (c *GatewayClaims) dropIfClosed() {
	if c.conn.IsClosed() {
		c.dropLocked()
	}
}

func (c *GatewayClaims) holds(gatewayID string) bool {
	c.heldMu.RLock()
	defer c.heldMu.RUnlock()
	return c.held[gatewayID]
}

// Fence returns this process's claim on gateway host key ("gw.<id>") as
// its writes carry it; ok is false when it does not hold it.
func (c *GatewayClaims) Fence(key string) (f domain.HostFence, ok bool) {
	id, found := strings.CutPrefix(key, domain.GatewayHostKey(""))
	if !found || !c.holds(id) {
		return domain.HostFence{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holds(id) {
		return domain.HostFence{}, false
	}
	return domain.HostFence{Host: key, Epoch: c.epochs[id], Since: c.since[id]}, true
}

// Holds implements devices.HostSet: whether this process holds host key
// (a gateway's, "gw.<gatewayId>") now.
func (c *GatewayClaims) Holds(key string) bool {
	id, ok := strings.CutPrefix(key, domain.GatewayHostKey(""))
	return ok && c.holds(id)
}

// Held implements devices.HostSet: the host keys of the gateways this
// process holds, sorted.
func (c *GatewayClaims) Held() []string {
	c.heldMu.RLock()
	keys := make([]string, 0, len(c.held))
	for id := range c.held {
		keys = append(keys, domain.GatewayHostKey(id))
	}
	c.heldMu.RUnlock()
	slices.Sort(keys)
	return keys
}

// HostState returns a reader of who holds a host (devices.HostState): for
// the sim host or a gateway's ("gw.<gatewayId>"), the epoch of its last
// take (0 when never taken) and whether any process holds its advisory
// lock in this database now. Errors are the database's, or one naming a
// host of neither kind.
func HostState(pool *pgxpool.Pool) func(ctx context.Context, host string) (epoch int64, held bool, err error) {
	return func(ctx context.Context, host string) (int64, bool, error) {
		lock, gatewayID := simHostLock, ""
		if id, ok := strings.CutPrefix(host, domain.GatewayHostKey("")); ok && id != "" {
			lock, gatewayID = gatewayLockPrefix+host, id
		} else if host != domain.HostSim {
			return 0, false, fmt.Errorf("backends: %q names no host", host)
		}
		var epoch int64
		var held bool
		err := pool.QueryRow(ctx, `SELECT coalesce(CASE WHEN $1 = '' THEN (SELECT epoch FROM sim_host WHERE id = 1)
				ELSE (SELECT epoch FROM gateway_hosts WHERE gateway_id = $1) END, 0), claim_held($2)`, gatewayID, lock).Scan(&epoch, &held)
		return epoch, held, err
	}
}
