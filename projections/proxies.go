package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// ProxiesName is the stable name of the Proxies projection.
const ProxiesName = "proxies"

// Proxies is the read side of managed proxies: orders, issued proxies, the
// devices behind them and the operations on them. It consumes the proxy.*
// events and emits none; rows are keyed by the events' own ids, so a
// rebuild reproduces them.
type Proxies struct{}

// Name implements Projection.
func (Proxies) Name() string { return ProxiesName }

// Tables implements Projection.
func (Proxies) Tables() []string {
	return []string{"proxy_orders", "proxies", "proxy_assignments", "proxy_assignment_history", "proxy_operations"}
}

// EventTypes implements Selective.
func (Proxies) EventTypes() []string { return []string{"proxy.%"} }

// Setup implements Projection.
func (Proxies) Setup(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := tx.Exec(ctx, `
	CREATE TABLE `+schema+`.proxy_orders (
		order_id             text PRIMARY KEY,
		org_id               text NOT NULL,
		proxy_id             text NOT NULL,
		product_id           text NOT NULL,
		product_name         text NOT NULL,
		kind                 text NOT NULL,
		country              text NOT NULL,
		protocol             text NOT NULL,
		currency             text NOT NULL,
		monthly_price        bigint NOT NULL,
		quote_id             text NOT NULL,
		state                text NOT NULL,
		checkout_url         text,
		expires_at           timestamptz,
		subscription_id      text,
		cancel_at_period_end boolean NOT NULL DEFAULT false,
		ended_reason         text,
		failed_code          text,
		created_by_kind      text NOT NULL,
		created_by_id        text NOT NULL,
		created_at           timestamptz NOT NULL,
		paid_at              timestamptz,
		refund               jsonb,
		dispute              jsonb
	);
	CREATE INDEX ON `+schema+`.proxy_orders (org_id, created_at DESC, order_id DESC);
	CREATE INDEX ON `+schema+`.proxy_orders (subscription_id);
	CREATE TABLE `+schema+`.proxies (
		proxy_id        text PRIMARY KEY,
		org_id          text NOT NULL,
		order_id        text NOT NULL,
		product_id      text NOT NULL,
		kind            text NOT NULL,
		country         text NOT NULL,
		protocol        text NOT NULL,
		host            text NOT NULL,
		port            integer NOT NULL,
		username        text NOT NULL UNIQUE,
		sealed_password bytea NOT NULL,
		state           text NOT NULL,
		issued_at       timestamptz NOT NULL,
		rotated_at      timestamptz,
		revealed        boolean NOT NULL DEFAULT false
	);
	CREATE INDEX ON `+schema+`.proxies (org_id, issued_at DESC, proxy_id DESC);
	CREATE TABLE `+schema+`.proxy_assignments (
		device_id   text PRIMARY KEY,
		proxy_id    text NOT NULL,
		org_id      text NOT NULL,
		assigned_at timestamptz NOT NULL
	);
	CREATE INDEX ON `+schema+`.proxy_assignments (proxy_id, device_id);
	CREATE TABLE `+schema+`.proxy_assignment_history (
		device_id  text NOT NULL,
		proxy_id   text NOT NULL,
		org_id     text NOT NULL,
		from_at    timestamptz NOT NULL,
		to_at      timestamptz,
		PRIMARY KEY (device_id, from_at)
	);
	CREATE TABLE `+schema+`.proxy_operations (
		operation_id text PRIMARY KEY,
		org_id       text NOT NULL,
		proxy_id     text NOT NULL,
		kind         text NOT NULL,
		device_ids   text[] NOT NULL,
		state        text NOT NULL,
		code         text,
		reason       text,
		by_kind      text NOT NULL,
		by_id        text NOT NULL,
		requested_at timestamptz NOT NULL,
		finished_at  timestamptz
	);
	CREATE INDEX ON `+schema+`.proxy_operations (org_id, requested_at DESC, operation_id DESC);
	CREATE INDEX ON `+schema+`.proxy_operations (requested_at, operation_id) WHERE state = 'pending';`)
	return err
}

// Apply implements Projection.
func (Proxies) Apply(ctx context.Context, tx pgx.Tx, schema string, events []eventstore.Event) error {
	for i := range events {
		e := &events[i]
		de, err := decodeEvent(ctx, *e)
		if err != nil {
			return fmt.Errorf("proxies: event %d: %w", e.Position, err)
		}
		if err := applyProxyEvent(ctx, tx, schema, e.OrgID, de); err != nil {
			return fmt.Errorf("proxies: %s at %d: %w", e.Type, e.Position, err)
		}
	}
	return nil
}

func applyProxyEvent(ctx context.Context, tx pgx.Tx, s, org string, de domain.Event) error {
	var err error
	switch e := de.(type) {
	case domain.ProxyOrderStarted:
		p := e.Product
		_, err = tx.Exec(ctx, `INSERT INTO `+s+`.proxy_orders (order_id, org_id, proxy_id, product_id, product_name, kind, country,
			protocol, currency, monthly_price, quote_id, state, created_by_kind, created_by_id, created_at)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15) ON CONFLICT DO NOTHING`,
			e.OrderID, e.OrgID, e.ProxyID, p.ID, p.Name, p.Kind, p.Country, p.Protocol, e.Currency, p.MonthlyPrice, e.QuoteID,
			domain.ProxyOrderRunning, e.By.Kind, e.By.ID, e.At)
	case domain.ProxyOrderOpened:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_orders SET state = $2, checkout_url = $3, expires_at = $4 WHERE order_id = $1`,
			e.OrderID, domain.ProxyOrderAwaitingPayment, e.CheckoutURL, e.ExpiresAt)
	case domain.ProxyOrderFailed:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_orders SET state = $2, failed_code = $3 WHERE order_id = $1`,
			e.OrderID, domain.ProxyOrderFailedState, e.Code)
	case domain.ProxyOrderPaid:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_orders SET state = $2, subscription_id = NULLIF($3, ''), paid_at = $4 WHERE order_id = $1`,
			e.OrderID, domain.ProxyOrderPaidState, e.SubscriptionID, e.At)
	case domain.ProxyIssued:
		_, err = tx.Exec(ctx, `INSERT INTO `+s+`.proxies (proxy_id, org_id, order_id, product_id, kind, country, protocol, host, port,
			username, sealed_password, state, issued_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13) ON CONFLICT DO NOTHING`,
			e.ProxyID, org, e.OrderID, e.ProductID, e.Kind, e.Country, e.Protocol, e.Host, e.Port, e.Username, e.SealedPassword,
			domain.ProxyActive, e.At)
	case domain.ProxyOrderCancelScheduled:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_orders SET cancel_at_period_end = true WHERE order_id = $1`, e.OrderID)
	case domain.ProxyOrderRenewed:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_orders SET cancel_at_period_end = false WHERE order_id = $1`, e.OrderID)
	case domain.ProxyOrderRefunded:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_orders SET refund = $2 WHERE order_id = $1`, e.OrderID,
			ProxyRefundView{ChargeID: e.ChargeID, Amount: e.Amount, AmountRefunded: e.AmountRefunded, Currency: e.Currency,
				Full: e.Full, At: e.At})
	case domain.ProxyOrderDisputed:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_orders SET dispute = $2 WHERE order_id = $1`, e.OrderID,
			ProxyDisputeView{DisputeID: e.DisputeID, ChargeID: e.ChargeID, Status: e.Status, Reason: e.Reason, Amount: e.Amount,
				Currency: e.Currency, At: e.At})
	case domain.ProxyOrderEnded:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_orders SET state = $2, ended_reason = $3 WHERE order_id = $1`,
			e.OrderID, domain.ProxyOrderEndedState, e.Reason)
		if err == nil {
			_, err = tx.Exec(ctx, `UPDATE `+s+`.proxies SET state = $2 WHERE order_id = $1`, e.OrderID, domain.ProxyRevoked)
		}
	case domain.ProxyOperationRequested:
		devices := e.DeviceIDs
		if devices == nil {
			devices = []string{}
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+s+`.proxy_operations (operation_id, org_id, proxy_id, kind, device_ids, state, by_kind,
			by_id, requested_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT DO NOTHING`,
			e.OperationID, org, e.ProxyID, e.Kind, devices, domain.ProxyOpPending, e.By.Kind, e.By.ID, e.At)
	case domain.ProxyOperationFinished:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_operations SET state = $2, code = NULLIF($3, ''), reason = NULLIF($4, ''),
			finished_at = $5 WHERE operation_id = $1`, e.OperationID, e.State, e.Code, e.Reason, e.At)
	case domain.ProxyAssigned:
		_, err = tx.Exec(ctx, `INSERT INTO `+s+`.proxy_assignments (device_id, proxy_id, org_id, assigned_at) VALUES ($1,$2,$3,$4)
			ON CONFLICT (device_id) DO UPDATE SET proxy_id = excluded.proxy_id, assigned_at = excluded.assigned_at`,
			e.DeviceID, e.ProxyID, org, e.At)
		if err == nil {
			_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_assignment_history SET to_at = $2 WHERE device_id = $1 AND to_at IS NULL`, e.DeviceID, e.At)
		}
		if err == nil {
			_, err = tx.Exec(ctx, `INSERT INTO `+s+`.proxy_assignment_history (device_id, proxy_id, org_id, from_at) VALUES ($1,$2,$3,$4)
				ON CONFLICT DO NOTHING`, e.DeviceID, e.ProxyID, org, e.At)
		}
	case domain.ProxyUnassigned:
		_, err = tx.Exec(ctx, `DELETE FROM `+s+`.proxy_assignments WHERE device_id = $1 AND proxy_id = $2`, e.DeviceID, e.ProxyID)
		if err == nil {
			_, err = tx.Exec(ctx, `UPDATE `+s+`.proxy_assignment_history SET to_at = $3 WHERE device_id = $1 AND proxy_id = $2 AND to_at IS NULL`,
				e.DeviceID, e.ProxyID, e.At)
		}
	case domain.ProxyCredentialsRotated:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxies SET username = $2, sealed_password = $3, rotated_at = $4, revealed = true
			WHERE proxy_id = $1`, e.ProxyID, e.Username, e.SealedPassword, e.At)
	case domain.ProxyCredentialsRevealed:
		_, err = tx.Exec(ctx, `UPDATE `+s+`.proxies SET revealed = true WHERE proxy_id = $1`, e.ProxyID)
	}
	return err
}

// ProxyOrderView is one order as the read model holds it.
type ProxyOrderView struct {
	OrderID, OrgID, ProxyID                         string
	ProductID, ProductName, Kind, Country, Protocol string
	Currency                                        string
	MonthlyPrice                                    int64
	QuoteID, State                                  string
	CheckoutURL                                     string
	ExpiresAt                                       *time.Time
	SubscriptionID                                  string
	CancelAtPeriodEnd                               bool
	EndedReason, FailedCode                         string
	By                                              domain.Actor
	CreatedAt                                       time.Time
	PaidAt                                          *time.Time
	// Refund and Dispute are the latest the provider reported of the
	// order's payment (nil: none).
	Refund  *ProxyRefundView
	Dispute *ProxyDisputeView
}

// ProxyRefundView is the provider's refund of an order's payment, as the
// read model keeps it (jsonb).
type ProxyRefundView struct {
	ChargeID       string    `json:"chargeId"`
	Amount         int64     `json:"amount"`
	AmountRefunded int64     `json:"amountRefunded"`
	Currency       string    `json:"currency"`
	Full           bool      `json:"full"`
	At             time.Time `json:"at"`
}

// ProxyDisputeView is a dispute of an order's payment, as the read model
// keeps it (jsonb).
type ProxyDisputeView struct {
	DisputeID string    `json:"disputeId"`
	ChargeID  string    `json:"chargeId"`
	Status    string    `json:"status"`
	Reason    string    `json:"reason,omitempty"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	At        time.Time `json:"at"`
}

const proxyOrderColumns = `order_id, org_id, proxy_id, product_id, product_name, kind, country, protocol, currency, monthly_price,
	quote_id, state, coalesce(checkout_url, ''), expires_at, coalesce(subscription_id, ''), cancel_at_period_end,
	coalesce(ended_reason, ''), coalesce(failed_code, ''), created_by_kind, created_by_id, created_at, paid_at, refund, dispute`

func scanProxyOrder(row pgx.Row) (ProxyOrderView, error) {
	var v ProxyOrderView
	err := row.Scan(&v.OrderID, &v.OrgID, &v.ProxyID, &v.ProductID, &v.ProductName, &v.Kind, &v.Country, &v.Protocol, &v.Currency,
		&v.MonthlyPrice, &v.QuoteID, &v.State, &v.CheckoutURL, &v.ExpiresAt, &v.SubscriptionID, &v.CancelAtPeriodEnd,
		&v.EndedReason, &v.FailedCode, &v.By.Kind, &v.By.ID, &v.CreatedAt, &v.PaidAt, &v.Refund, &v.Dispute)
	return v, err
}

// ProxyQueries reads the managed proxies' read model; every read is
// filtered by organisation.
type ProxyQueries struct{ DB *pgxpool.Pool }

// ListProxyOrders lists an organisation's orders, newest first.
func (q ProxyQueries) ListProxyOrders(ctx context.Context, orgID string, limit int) ([]ProxyOrderView, error) {
	rows, err := q.DB.Query(ctx, `SELECT `+proxyOrderColumns+` FROM proxy_orders WHERE org_id = $1
		ORDER BY created_at DESC, order_id DESC LIMIT $2`, orgID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProxyOrderView, error) { return scanProxyOrder(r) })
}

// GetProxyOrder reads one order of an organisation.
func (q ProxyQueries) GetProxyOrder(ctx context.Context, orgID, orderID string) (ProxyOrderView, bool, error) {
	v, err := scanProxyOrder(q.DB.QueryRow(ctx, `SELECT `+proxyOrderColumns+` FROM proxy_orders WHERE org_id = $1 AND order_id = $2`,
		orgID, orderID))
	if errors.Is(err, pgx.ErrNoRows) {
		return ProxyOrderView{}, false, nil
	}
	return v, err == nil, err
}

// ProxyOrderOfSubscription finds the order a provider subscription pays
// (any organisation's: the provider's events name no organisation).
func (q ProxyQueries) ProxyOrderOfSubscription(ctx context.Context, subscriptionID string) (orgID, orderID string, ok bool, err error) {
	if subscriptionID == "" {
		return "", "", false, nil
	}
	err = q.DB.QueryRow(ctx, `SELECT org_id, order_id FROM proxy_orders WHERE subscription_id = $1 ORDER BY order_id LIMIT 1`,
		subscriptionID).Scan(&orgID, &orderID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	return orgID, orderID, err == nil, err
}

// ProxyView is one proxy as the read model holds it (the password stays
// sealed; it is never answered after issue).
type ProxyView struct {
	ProxyID, OrgID, OrderID, ProductID string
	Kind, Country, Protocol, Host      string
	Port                               int
	Username                           string
	State                              string
	Devices                            []string
	IssuedAt                           time.Time
	RotatedAt                          *time.Time
	// Revealed reports whether the password was shown already.
	Revealed bool
}

const proxyColumns = `p.proxy_id, p.org_id, p.order_id, p.product_id, p.kind, p.country, p.protocol, p.host, p.port, p.username,
	p.state, coalesce((SELECT array_agg(a.device_id ORDER BY a.device_id) FROM proxy_assignments a WHERE a.proxy_id = p.proxy_id), '{}'),
	p.issued_at, p.rotated_at, p.revealed`

func scanProxy(row pgx.Row) (ProxyView, error) {
	var v ProxyView
	err := row.Scan(&v.ProxyID, &v.OrgID, &v.OrderID, &v.ProductID, &v.Kind, &v.Country, &v.Protocol, &v.Host, &v.Port, &v.Username,
		&v.State, &v.Devices, &v.IssuedAt, &v.RotatedAt, &v.Revealed)
	return v, err
}

// ListProxies lists an organisation's proxies, newest first.
func (q ProxyQueries) ListProxies(ctx context.Context, orgID string, limit int) ([]ProxyView, error) {
	rows, err := q.DB.Query(ctx, `SELECT `+proxyColumns+` FROM proxies p WHERE p.org_id = $1
		ORDER BY p.issued_at DESC, p.proxy_id DESC LIMIT $2`, orgID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProxyView, error) { return scanProxy(r) })
}

// GetProxy reads one proxy of an organisation.
func (q ProxyQueries) GetProxy(ctx context.Context, orgID, proxyID string) (ProxyView, bool, error) {
	v, err := scanProxy(q.DB.QueryRow(ctx, `SELECT `+proxyColumns+` FROM proxies p WHERE p.org_id = $1 AND p.proxy_id = $2`,
		orgID, proxyID))
	if errors.Is(err, pgx.ErrNoRows) {
		return ProxyView{}, false, nil
	}
	return v, err == nil, err
}

// ProxyOfDevice names the proxy a device of an organisation is behind
// ("" when none).
func (q ProxyQueries) ProxyOfDevice(ctx context.Context, orgID, deviceID string) (string, error) {
	var id string
	err := q.DB.QueryRow(ctx, `SELECT proxy_id FROM proxy_assignments WHERE org_id = $1 AND device_id = $2`, orgID, deviceID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// DeviceAt is a device at a moment (a receipt's device and time).
type DeviceAt struct {
	DeviceID string
	At       time.Time
}

// ProxiesAt names, for each device at its moment, the proxy it was behind
// then ("" when it connected directly), in the order asked.
func (q ProxyQueries) ProxiesAt(ctx context.Context, orgID string, at []DeviceAt) ([]string, error) {
	out := make([]string, len(at))
	if len(at) == 0 {
		return out, nil
	}
	devices, times := make([]string, len(at)), make([]time.Time, len(at))
	for i, d := range at {
		devices[i], times[i] = d.DeviceID, d.At
	}
	rows, err := q.DB.Query(ctx, `SELECT x.i, h.proxy_id FROM unnest($2::text[], $3::timestamptz[]) WITH ORDINALITY AS x(device_id, at, i)
		JOIN proxy_assignment_history h ON h.org_id = $1 AND h.device_id = x.device_id AND h.from_at <= x.at AND (h.to_at IS NULL OR h.to_at > x.at)`,
		orgID, devices, times)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var i int64
		var id string
		if err := rows.Scan(&i, &id); err != nil {
			return nil, err
		}
		out[i-1] = id
	}
	return out, rows.Err()
}

// ProxyCredentials are a live proxy's credentials, sealed, found by
// username (the forward proxy's check).
type ProxyCredentials struct {
	ProxyID, OrgID string
	SealedPassword []byte
}

// ActiveProxyByUsername finds the active proxy a username belongs to.
func (q ProxyQueries) ActiveProxyByUsername(ctx context.Context, username string) (ProxyCredentials, bool, error) {
	var c ProxyCredentials
	err := q.DB.QueryRow(ctx, `SELECT proxy_id, org_id, sealed_password FROM proxies WHERE username = $1 AND state = $2`,
		username, domain.ProxyActive).Scan(&c.ProxyID, &c.OrgID, &c.SealedPassword)
	if errors.Is(err, pgx.ErrNoRows) {
		return ProxyCredentials{}, false, nil
	}
	return c, err == nil, err
}

// ProxyOperationView is one operation as the read model holds it.
type ProxyOperationView struct {
	OperationID, OrgID, ProxyID, Kind string
	DeviceIDs                         []string
	State, Code, Reason               string
	By                                domain.Actor
	RequestedAt                       time.Time
	FinishedAt                        *time.Time
}

const proxyOpColumns = `operation_id, org_id, proxy_id, kind, device_ids, state, coalesce(code, ''), coalesce(reason, ''),
	by_kind, by_id, requested_at, finished_at`

func scanProxyOp(row pgx.Row) (ProxyOperationView, error) {
	var v ProxyOperationView
	err := row.Scan(&v.OperationID, &v.OrgID, &v.ProxyID, &v.Kind, &v.DeviceIDs, &v.State, &v.Code, &v.Reason, &v.By.Kind, &v.By.ID,
		&v.RequestedAt, &v.FinishedAt)
	return v, err
}

// ListProxyOperations lists an organisation's operations, newest first,
// of one proxy when proxyID is set.
func (q ProxyQueries) ListProxyOperations(ctx context.Context, orgID, proxyID string, limit int) ([]ProxyOperationView, error) {
	rows, err := q.DB.Query(ctx, `SELECT `+proxyOpColumns+` FROM proxy_operations WHERE org_id = $1 AND ($2 = '' OR proxy_id = $2)
		ORDER BY requested_at DESC, operation_id DESC LIMIT $3`, orgID, proxyID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProxyOperationView, error) { return scanProxyOp(r) })
}

// GetProxyOperation reads one operation of an organisation.
func (q ProxyQueries) GetProxyOperation(ctx context.Context, orgID, operationID string) (ProxyOperationView, bool, error) {
	v, err := scanProxyOp(q.DB.QueryRow(ctx, `SELECT `+proxyOpColumns+` FROM proxy_operations WHERE org_id = $1 AND operation_id = $2`,
		orgID, operationID))
	if errors.Is(err, pgx.ErrNoRows) {
		return ProxyOperationView{}, false, nil
	}
	return v, err == nil, err
}

// PendingProxyOperations lists operations waiting to be performed, oldest
// first.
func (q ProxyQueries) PendingProxyOperations(ctx context.Context, limit int) ([]ProxyOperationView, error) {
	rows, err := q.DB.Query(ctx, `SELECT `+proxyOpColumns+` FROM proxy_operations WHERE state = $1
		ORDER BY requested_at, operation_id LIMIT $2`, domain.ProxyOpPending, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ProxyOperationView, error) { return scanProxyOp(r) })
}
