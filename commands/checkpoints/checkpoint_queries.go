package checkpoints

import (
	"context"

	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/receiptchain"
)

// ListSigningKeys asks for the published signing keys
// (GET /v1/receipts/signing-keys). It needs no credential: the keys are
// the service's, the same for every organisation, and an auditor outside
// the organisation checks checkpoints with them.
type ListSigningKeys struct{}

// ListSigningKeysHandler handles ListSigningKeys.
type ListSigningKeysHandler struct{ c *Checkpoints }

// Handle returns every key that ever signed, newest first. It reads the
// keys' stream itself (a handful of events), not a read model: a key is
// published the moment it can sign, before any checkpoint it signs.
func (h ListSigningKeysHandler) Handle(ctx context.Context, _ ListSigningKeys) (receiptchain.KeySet, error) {
	keys, _, err := h.c.keys().Load(ctx, "")
	if err != nil {
		return receiptchain.KeySet{}, err
	}
	set := receiptchain.KeySet{Keys: make([]receiptchain.PublishedKey, 0, len(keys.Keys))}
	for i := len(keys.Keys) - 1; i >= 0; i-- {
		set.Keys = append(set.Keys, keys.Keys[i].Published())
	}
	return set, nil
}

// ListCheckpoints asks for the organisation's checkpoints
// (GET /v1/receipts/checkpoints), newest first, counting fewer than Before
// entries when Before is not 0.
type ListCheckpoints struct {
	Auth   domain.Auth
	Before int64
	Limit  int
}

// CheckpointPage is one page of checkpoints; NextBefore, when not 0, asks
// for the next.
type CheckpointPage struct {
	Checkpoints []receiptchain.Checkpoint
	NextBefore  int64
}

// Default and largest page of checkpoints.
const (
	DefaultCheckpointPage = 50
	MaxCheckpointPage     = 200
)

// ListCheckpointsHandler handles ListCheckpoints.
type ListCheckpointsHandler struct{ c *Checkpoints }

// Handle needs devices:read, and is refused (permission_denied) to OAuth
// apps and to API keys narrowed to a device subset, as the export is: a
// checkpoint speaks for every receipt of the organisation.
// invalid_argument for a limit below 1 or a negative before.
func (h ListCheckpointsHandler) Handle(ctx context.Context, q ListCheckpoints) (CheckpointPage, error) {
	auth := q.Auth
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return CheckpointPage{}, err
	}
	if err := auth.DenyApp("receipt checkpoints", "the console or with an API key"); err != nil {
		return CheckpointPage{}, err
	}
	if auth.Devices != nil {
		return CheckpointPage{}, domain.Errorf(domain.CodePermissionDenied,
			"receipt checkpoints cover every device of the organisation; this API key is narrowed to some devices: use a key without a device subset")
	}
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultCheckpointPage
	case limit < 0:
		return CheckpointPage{}, domain.Errorf(domain.CodeInvalidArgument, "limit must be at least 1")
	case limit > MaxCheckpointPage:
		limit = MaxCheckpointPage
	}
	if q.Before < 0 {
		return CheckpointPage{}, domain.Errorf(domain.CodeInvalidArgument, "before must be an entry count, 1 or more")
	}
	cps, err := projections.Checkpoints(ctx, h.c.Pool, auth.OrgID, q.Before, limit+1)
	if err != nil {
		return CheckpointPage{}, err
	}
	page := CheckpointPage{Checkpoints: cps}
	if len(cps) > limit {
		page.Checkpoints = cps[:limit]
		page.NextBefore = cps[limit-1].Entries
	}
	if page.Checkpoints == nil {
		page.Checkpoints = []receiptchain.Checkpoint{}
	}
	return page, nil
}
