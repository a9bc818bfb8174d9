package fleet

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"phonefleet/domain"
	"phonefleet/projections"
)

// ReviewReceipt records that a person reviewed a receipt (POST
// /v1/receipts/{idempotencyKey}/reviewed).
type ReviewReceipt struct {
	Auth           domain.Auth
	IdempotencyKey string
	// Note is an optional remark (at most 2000 bytes).
	Note string
}

// ReviewReceiptHandler handles ReviewReceipt.
type ReviewReceiptHandler struct{ f *Fleet }

// ReviewReceipt returns the handler of ReviewReceipt.
func (f *Fleet) ReviewReceipt() ReviewReceiptHandler { return ReviewReceiptHandler{f} }

// Handle appends receipt.reviewed to the action's stream and answers the
// receipt as the read model then shows it. It needs devices:read and a
// person (a console session or the local operator): an API key or an
// OAuth app is refused with permission_denied. Errors: receipt_not_found,
// invalid_argument.
func (h ReviewReceiptHandler) Handle(ctx context.Context, cmd ReviewReceipt) (domain.Receipt, error) {
	f := h.f
	auth := cmd.Auth
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return domain.Receipt{}, err
	}
	if auth.Kind == domain.PrincipalAPIKey || auth.Kind == domain.PrincipalApp {
		return domain.Receipt{}, domain.Errorf(domain.CodePermissionDenied, "only a person signed in to the console can record a review")
	}
	var actionID, deviceID string
	err := f.pool.QueryRow(ctx, `SELECT action_id, device_id FROM action_idempotency WHERE org_id = $1 AND idempotency_key = $2`,
		auth.OrgID, cmd.IdempotencyKey).Scan(&actionID, &deviceID)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !auth.CanSeeDevice(deviceID) {
		return domain.Receipt{}, receiptNotFound(cmd.IdempotencyKey)
	}
	if err != nil {
		return domain.Receipt{}, err
	}
	reviewer := domain.ActorOf(auth)
	_, c, err := f.actions.Update(ctx, actionID, func(rec *domain.ActionRecord) ([]domain.Event, error) {
		return rec.MarkReviewed(reviewer, cmd.Note, f.now())
	})
	if err != nil {
		return domain.Receipt{}, err
	}
	if err := f.waitFor(ctx, c.Last(), projections.ReceiptsName); err != nil {
		return domain.Receipt{}, err
	}
	return f.receipt(ctx, auth, cmd.IdempotencyKey)
}
