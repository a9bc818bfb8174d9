package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/commands/provisioning"
)

// fulfilmentSubcommand is one subcommand of `phonefleet fulfilments`: a
// usage line and what it runs with the rest of the command line.
type fulfilmentSubcommand struct {
	usage string
	run   func(ctx context.Context, args []string, out io.Writer) error
}

// fulfilmentSubcommands are the subcommands of `phonefleet fulfilments`,
// by name. Each registers itself from an init function in its own file
// (refund here; reconcile beside the billing commands), so the family
// needs no list to keep.
var fulfilmentSubcommands = map[string]fulfilmentSubcommand{}

func init() {
	fulfilmentSubcommands["refund"] = fulfilmentSubcommand{usage: fulfilmentsRefundUsage, run: fulfilmentsRefund}
}

// fulfilmentsUsage lists the family's subcommands.
func fulfilmentsUsage() string {
	names := make([]string, 0, len(fulfilmentSubcommands))
	for n := range fulfilmentSubcommands {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(fulfilmentSubcommands[n].usage)
	}
	return b.String()
}

// fulfilmentsCmd runs `phonefleet fulfilments …`.
func fulfilmentsCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return usageError{fulfilmentsUsage()}
	}
	sub, ok := fulfilmentSubcommands[args[0]]
	if !ok {
		return usageError{fmt.Sprintf("unknown subcommand %q\n%s", args[0], fulfilmentsUsage())}
	}
	return sub.run(ctx, args[1:], out)
}

const fulfilmentsRefundUsage = `usage: phonefleet fulfilments refund ID

The deployment owner's refund of one phone: a provisioned or awaiting
fulfilment is cancelled with reason owner_refund and its device leaves the
organisation. No fulfilment.changed webhook is sent (spec 3.2); the customer
sees it in GET /v1/fulfilments. Refund the money itself in the payment
provider's dashboard.`

// fulfilmentsRefund runs `phonefleet fulfilments refund ID`.
func fulfilmentsRefund(ctx context.Context, args []string, out io.Writer) error {
	return withOperator(ctx, "fulfilments refund", args, nil, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		if fs.NArg() != 1 {
			return usageError{fulfilmentsRefundUsage}
		}
		// The fulfilment's device is retired in the same unit. No read
		// model is waited for: the service may not be running.
		f, err := op.App.Provisioning.RefundFulfilment.Handle(op.Context(ctx), provisioning.RefundFulfilment{FulfilmentID: fs.Arg(0)})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "fulfilment %s of %s is %s (%s)\n", f.FulfilmentID, f.OrgID, f.State, f.CancelledReason)
		return nil
	})
}
