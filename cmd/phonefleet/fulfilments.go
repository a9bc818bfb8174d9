package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/commands/provisioning"
)

const fulfilmentsRefundUsage = `usage: phonefleet fulfilments refund ID

The deployment owner's refund of one phone: a provisioned or awaiting
fulfilment is cancelled with reason owner_refund and its device leaves the
organisation. No fulfilment.changed webhook is sent (spec 3.2); the customer
sees it in GET /v1/fulfilments. Refund the money itself in the payment
provider's dashboard.`

// fulfilmentsRefundCmd runs `phonefleet fulfilments refund ID`.
func fulfilmentsRefundCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	return withOperator(ctx, c, args, out, nil, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		if fs.NArg() != 1 {
			return usageError{fulfilmentsRefundUsage}
		}
		// The fulfilment's device is retired in the same unit, with the
		// runs on it the runs read model lists; its tables are made if the
		// service never ran on this database. No read model is waited for:
		// the service may not be running.
		if err := op.Runner.Ensure(ctx); err != nil {
			return err
		}
		f, err := op.App.Provisioning.RefundFulfilment.Handle(op.Context(ctx), provisioning.RefundFulfilment{FulfilmentID: fs.Arg(0)})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "fulfilment %s of %s is %s (%s)\n", f.FulfilmentID, f.OrgID, f.State, f.CancelledReason)
		return nil
	})
}
