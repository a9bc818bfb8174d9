package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/commands/cqrs"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
	"phonefleet/projections"
)

const paymentsFollowupsUsage = `usage: phonefleet payments followups [-json]

Lists the payment follow-ups that wait for the operator: those the payment
provider refused (a 4xx: not retried) and those that gave up after every
attempt while the provider was unavailable. Each one is money the service
could not return or a subscription it could not cancel. Retry one with
phonefleet payments followups retry ID, or close it by hand (once done in
the provider's dashboard) with phonefleet payments followups settle ID
-reason TEXT. The follow-ups read model is first brought up to date.`

const paymentsFollowupsRetryUsage = `usage: phonefleet payments followups retry ID

Makes a refused or given-up payment follow-up due again: the service's
follow-up worker makes one more attempt, with the same idempotency key as
every earlier one (the provider never acts twice). Recorded as an event with
the operator as actor.`

const paymentsFollowupsSettleUsage = `usage: phonefleet payments followups settle ID -reason TEXT

Closes a refused or given-up payment follow-up by hand, with the reason
(e.g. "refunded in the dashboard"): it is attempted no more and no longer
listed. Recorded as an event with the operator as actor.`

// paymentsFollowupsOptions are the flags of `phonefleet payments followups`.
type paymentsFollowupsOptions struct{ asJSON bool }

func (o *paymentsFollowupsOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON document instead of a table")
}

// paymentsFollowupsCmd runs `phonefleet payments followups`.
func paymentsFollowupsCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	var o paymentsFollowupsOptions
	return withOperator(ctx, c, args, out, o.register, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, logger *slog.Logger) error {
		if fs.NArg() > 0 {
			return usageError{c.help}
		}
		if err := catchUpReadModel(ctx, op, logger, projections.PaymentFollowups{}); err != nil {
			return err
		}
		stuck, err := op.App.Provisioning.ListStuckFollowups.Handle(ctx, provisioning.ListStuckFollowups{})
		if err != nil {
			return err
		}
		if o.asJSON {
			return writeFollowupsJSON(out, stuck)
		}
		return writeFollowupsText(out, stuck)
	})
}

// catchUpReadModel consumes projection alone until it has applied every
// event committed so far (beside the service's own consumer, if it runs:
// the checkpoint serialises them), so an operator command reading it sees
// the log as it is even while the service is down.
func catchUpReadModel(ctx context.Context, op *service.Operator, logger *slog.Logger, projection projections.Projection) error {
	runner, err := projections.NewRunner(op.Store, logger, []projections.Projection{projection})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = runner.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	wctx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := cqrs.AwaitAll(wctx, op.Store, runner, projection.Name()); err != nil {
		return fmt.Errorf("the %s read model did not catch up: %w", projection.Name(), err)
	}
	return nil
}

func writeFollowupsText(out io.Writer, fs []projections.FollowupView) error {
	if len(fs) == 0 {
		_, err := fmt.Fprintln(out, "no payment follow-up waits for the operator")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FOLLOWUP\tSTATUS\tORG\tFULFILMENT\tACTION\tPROVIDER\tAMOUNT\tATTEMPTS\tUPDATED\tERROR")
	for _, f := range fs {
		provider := f.SubscriptionID
		if f.Action == domain.FollowupRefund {
			provider = f.PaymentIntentID
		}
		amount := "-"
		if f.Amount > 0 {
			amount = fmt.Sprintf("%d %s", f.Amount, f.Currency)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", f.FollowupID, f.Status, f.OrgID, f.FulfilmentID, f.Action,
			provider, amount, f.Attempts, f.UpdatedAt.UTC().Format(time.RFC3339), f.LastError)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d follow-up(s) wait for the operator: phonefleet payments followups retry ID, or settle ID -reason TEXT\n", len(fs))
	return err
}

// followupJSON is one follow-up of the -json document.
type followupJSON struct {
	FollowupID      string `json:"followupId"`
	Status          string `json:"status"`
	Outcome         string `json:"outcome"`
	OrgID           string `json:"orgId"`
	FulfilmentID    string `json:"fulfilmentId"`
	Trigger         string `json:"trigger"`
	Reason          string `json:"reason,omitempty"`
	Action          string `json:"action"`
	Note            string `json:"note,omitempty"`
	SubscriptionID  string `json:"subscriptionId,omitempty"`
	PaymentIntentID string `json:"paymentIntentId,omitempty"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	Attempts        int    `json:"attempts"`
	LastError       string `json:"lastError,omitempty"`
	UpdatedAt       string `json:"updatedAt"`
}

func writeFollowupsJSON(out io.Writer, fs []projections.FollowupView) error {
	doc := struct {
		Followups []followupJSON `json:"followups"`
	}{Followups: make([]followupJSON, 0, len(fs))}
	for _, f := range fs {
		doc.Followups = append(doc.Followups, followupJSON{FollowupID: f.FollowupID, Status: f.Status, Outcome: f.Outcome,
			OrgID: f.OrgID, FulfilmentID: f.FulfilmentID, Trigger: f.TriggerEvent, Reason: f.Reason, Action: f.Action, Note: f.Note,
			SubscriptionID: f.SubscriptionID, PaymentIntentID: f.PaymentIntentID, Amount: f.Amount, Currency: f.Currency,
			Attempts: f.Attempts, LastError: f.LastError, UpdatedAt: domain.FormatWebhookTime(f.UpdatedAt)})
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// paymentsFollowupsRetryCmd runs `phonefleet payments followups retry ID`.
func paymentsFollowupsRetryCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	return withOperator(ctx, c, args, out, nil, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		if fs.NArg() != 1 {
			return usageError{c.help}
		}
		ev, err := op.App.Provisioning.RetryPaymentFollowup.Handle(op.Context(ctx), provisioning.RetryPaymentFollowup{FollowupID: fs.Arg(0)})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "follow-up %s is due again (attempt %d, by the running service's follow-up worker)\n", ev.FollowupID, ev.AfterAttempt+1)
		return err
	})
}

// paymentsFollowupsSettleOptions are the flags of `… settle`.
type paymentsFollowupsSettleOptions struct{ reason string }

func (o *paymentsFollowupsSettleOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.reason, "reason", "", "why the follow-up is closed by hand (required)")
}

// paymentsFollowupsSettleCmd runs `phonefleet payments followups settle ID -reason TEXT`.
func paymentsFollowupsSettleCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	var o paymentsFollowupsSettleOptions
	// `settle ID -reason TEXT` reads as the issue writes it; the flag
	// package stops at the first argument, so the id goes last.
	if len(args) > 1 && !strings.HasPrefix(args[0], "-") {
		args = append(slices.Clone(args[1:]), args[0])
	}
	return withOperator(ctx, c, args, out, o.register, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		if fs.NArg() != 1 {
			return usageError{c.help}
		}
		ev, err := op.App.Provisioning.SettlePaymentFollowup.Handle(op.Context(ctx),
			provisioning.SettlePaymentFollowup{FollowupID: fs.Arg(0), Reason: o.reason})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "follow-up %s is settled by hand: %s\n", ev.FollowupID, ev.Reason)
		return err
	})
}
