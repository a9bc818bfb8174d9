package fleet

import (
	"context"
	"errors"

	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/receiptchain"
)

// ExportReceipts asks for the organisation's receipt chain
// (GET /v1/receipts/export).
type ExportReceipts struct {
	Auth domain.Auth
}

// ReceiptExport is an organisation's receipt chain up to Head, read page
// by page by Lines, so an export of any size holds one page in memory.
type ReceiptExport struct {
	OrgID string
	// Head is the last entry the export covers: entries appended while it
	// is read are left for the next export, so the end line matches.
	Head receiptchain.Head
	// Lines calls emit with each entry's line (canonical JSON, no
	// newline), oldest first, each followed by the line of the signed
	// checkpoint of that entry if there is one, then with the end line; it stops at the
	// first error emit or the database returns. flush, when not nil, is
	// called after each page.
	Lines func(ctx context.Context, emit func(line []byte) error, flush func()) error
}

// exportPage is how many entries one query of an export reads.
const exportPage = 500

// exportReceipts answers the organisation's receipt chain (devices:read).
// It is refused with permission_denied to OAuth apps (the receipt feed is
// not theirs, spec 5.2) and to API keys narrowed to a device subset: the
// chain links every receipt of the organisation, so a part of it cannot be
// verified, and a credential that may not see some devices may not read
// their receipts. It waits for the chain to include every event committed
// before the call; service_unavailable (retryable) when the chain is still
// being built.
func (f *Fleet) exportReceipts(ctx context.Context, q ExportReceipts) (ReceiptExport, error) {
	auth := q.Auth
	if err := auth.Require(domain.ScopeDevicesRead); err != nil {
		return ReceiptExport{}, err
	}
	if err := auth.DenyApp("the receipts export", "the console or with an API key"); err != nil {
		return ReceiptExport{}, err
	}
	if auth.Devices != nil {
		return ReceiptExport{}, domain.Errorf(domain.CodePermissionDenied,
			"the receipts export covers every device of the organisation; this API key is narrowed to some devices: use GET /v1/receipts, or a key without a device subset")
	}
	if err := f.waitForHead(ctx, projections.ReceiptChainName); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return ReceiptExport{}, domain.Errorf(domain.CodeServiceUnavailable, "the receipt chain is still being built; try again shortly").WithRetryable(true)
		}
		return ReceiptExport{}, err
	}
	head, err := projections.ChainHead(ctx, f.pool, auth.OrgID)
	if err != nil {
		return ReceiptExport{}, err
	}
	org := auth.OrgID
	return ReceiptExport{OrgID: org, Head: head, Lines: func(ctx context.Context, emit func([]byte) error, flush func()) error {
		for after := int64(0); after < head.Seq; {
			lines, last, err := projections.ChainPage(ctx, f.pool, org, after, head.Seq, exportPage)
			if err != nil {
				return err
			}
			if len(lines) == 0 {
				return errors.New("receipt chain: entries missing below the head")
			}
			signed, err := projections.CheckpointLines(ctx, f.pool, org, after, last)
			if err != nil {
				return err
			}
			for i, l := range lines {
				if err := emit([]byte(l)); err != nil {
					return err
				}
				if c, ok := signed[after+int64(i)+1]; ok {
					if err := emit([]byte(c)); err != nil {
						return err
					}
				}
			}
			if flush != nil {
				flush()
			}
			after = last
		}
		end, err := receiptchain.EndLine(org, head)
		if err != nil {
			return err
		}
		return emit(end)
	}}, nil
}
