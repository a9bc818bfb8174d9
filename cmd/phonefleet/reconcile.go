package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/commands/provisioning"
	"phonefleet/domain"
)

const reconcileUsage = `usage: phonefleet fulfilments reconcile [-json] [-csv FILE]

For finance: compares the payment provider's records (every subscription,
payment, refund and dispute, and the invoice of each refunded or disputed
charge that names no order; SERVICE_STRIPE_SECRET_KEY,
SERVICE_STRIPE_API_BASE) with
the organisations' orders and fulfilments, and prints one line per
difference (a live phone whose subscription ended, a subscription renewing
for no phone, a payment or refund no order accounts for, an amount that is
not the order's price times its quantity, ...); -json prints one JSON
document instead; -csv FILE also writes the differences as CSV (one row
per difference: kind, organisation, our order and fulfilments, the
provider's objects, detail) for a spreadsheet. It is read-only: our records
are read from the event log in one read-only transaction; nothing is
written and no read model is advanced. Exits 0 when nothing differs, 1 when something does, 2 on an error (no
payment provider configured, the provider or the database failed).`

// reconcileOptions are the flags of `phonefleet fulfilments reconcile`.
type reconcileOptions struct {
	asJSON  bool
	csvFile string
}

func (o *reconcileOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON document instead of one line per difference")
	fs.StringVar(&o.csvFile, "csv", "", "also write the differences as CSV to this file, for a spreadsheet")
}

// reconcileCmd runs `phonefleet fulfilments reconcile`.
func reconcileCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	var o reconcileOptions
	err := withOperator(ctx, c, args, out, o.register, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		if fs.NArg() > 0 {
			return usageError{reconcileUsage}
		}
		if fs.Lookup("stripe-secret-key").Value.String() == "" {
			return errors.New("no payment provider is configured: set SERVICE_STRIPE_SECRET_KEY (and SERVICE_STRIPE_API_BASE for another API than Stripe's)")
		}
		rep, err := op.App.Provisioning.Reconcile.Handle(ctx, provisioning.Reconcile{})
		if err != nil {
			return err
		}
		if o.csvFile != "" {
			if err := writeReconcileCSVFile(o.csvFile, rep); err != nil {
				return err
			}
		}
		if o.asJSON {
			err = writeReconcileJSON(out, rep)
		} else {
			err = writeReconcileText(out, rep)
		}
		if err != nil {
			return err
		}
		if !rep.Clean() {
			return reconcileDifferences(len(rep.Differences))
		}
		return nil
	})
	var u usageError
	var d reconcileDifferences
	if err == nil || errors.As(err, &u) || errors.Is(err, flag.ErrHelp) || errors.As(err, &d) {
		return err
	}
	return reconcileFailed{err}
}

// reconcileDifferences is the outcome of a reconciliation that found
// differences: exit status 1.
type reconcileDifferences int

func (n reconcileDifferences) Error() string {
	return fmt.Sprintf("fulfilments reconcile: %d difference(s) with the payment provider", int(n))
}

// ExitCode implements the exit status of the command (see exitCode).
func (reconcileDifferences) ExitCode() int { return 1 }

// reconcileFailed is a reconciliation that could not be made: exit status
// 2, so a script tells "the books differ" from "nothing was compared".
type reconcileFailed struct{ err error }

func (e reconcileFailed) Error() string { return "fulfilments reconcile: " + e.err.Error() }
func (e reconcileFailed) Unwrap() error { return e.err }

// ExitCode implements the exit status of the command (see exitCode).
func (reconcileFailed) ExitCode() int { return 2 }

func writeReconcileText(out io.Writer, rep provisioning.ReconcileReport) error {
	for _, d := range rep.Differences {
		if _, err := fmt.Fprintln(out, "DIFFERENCE", d); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "compared %d billing accounts (%d orders) and %d fulfilments with the provider's %d subscriptions, %d payments, %d refunds and %d disputes",
		rep.Accounts, rep.Orders, rep.Fulfilments, rep.Subscriptions, rep.Payments, rep.Refunds, rep.Disputes)
	fmt.Fprintf(out, " (%d payments of our customers naming no order, not compared; %d records not ours)\n", rep.InvoicePayments, rep.NotOurs)
	if rep.Clean() {
		_, err := fmt.Fprintln(out, "OK: no differences")
		return err
	}
	_, err := fmt.Fprintf(out, "%d difference(s)\n", len(rep.Differences))
	return err
}

// reconcileJSON is the -json document.
type reconcileJSON struct {
	Clean          bool                      `json:"clean"`
	ProviderReadAt string                    `json:"providerReadAt"`
	Checked        reconcileJSONChecked      `json:"checked"`
	Differences    []reconcileJSONDifference `json:"differences"`
}

type reconcileJSONChecked struct {
	Accounts        int `json:"accounts"`
	Orders          int `json:"orders"`
	Fulfilments     int `json:"fulfilments"`
	Subscriptions   int `json:"subscriptions"`
	Payments        int `json:"payments"`
	Refunds         int `json:"refunds"`
	Disputes        int `json:"disputes"`
	InvoicePayments int `json:"invoicePayments"`
	NotOurs         int `json:"notOurs"`
}

type reconcileJSONDifference struct {
	Kind          string   `json:"kind"`
	OrgID         string   `json:"orgId,omitempty"`
	OrderID       string   `json:"orderId,omitempty"`
	FulfilmentIDs []string `json:"fulfilmentIds"`
	ProviderIDs   []string `json:"providerIds"`
	Detail        string   `json:"detail"`
}

func writeReconcileJSON(out io.Writer, rep provisioning.ReconcileReport) error {
	doc := reconcileJSON{Clean: rep.Clean(), ProviderReadAt: domain.FormatWebhookTime(rep.ProviderReadAt),
		Checked: reconcileJSONChecked{Accounts: rep.Accounts, Orders: rep.Orders, Fulfilments: rep.Fulfilments,
			Subscriptions: rep.Subscriptions, Payments: rep.Payments, Refunds: rep.Refunds, Disputes: rep.Disputes,
			InvoicePayments: rep.InvoicePayments, NotOurs: rep.NotOurs},
		Differences: make([]reconcileJSONDifference, 0, len(rep.Differences))}
	for _, d := range rep.Differences {
		doc.Differences = append(doc.Differences, reconcileJSONDifference{Kind: d.Kind, OrgID: d.OrgID, OrderID: d.OrderID,
			FulfilmentIDs: append([]string{}, d.FulfilmentIDs...), ProviderIDs: append([]string{}, d.ProviderIDs...), Detail: d.Detail})
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// reconcileCSVHeader names the columns of -csv.
var reconcileCSVHeader = []string{"kind", "org_id", "order_id", "fulfilment_ids", "provider_ids", "detail"}

// writeReconcileCSVFile writes the differences as CSV (RFC 4180, ids of one
// cell separated by spaces) to path, replacing it.
func writeReconcileCSVFile(path string, rep provisioning.ReconcileReport) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(reconcileCSVHeader)
	for _, d := range rep.Differences {
		_ = w.Write([]string{d.Kind, d.OrgID, d.OrderID, strings.Join(d.FulfilmentIDs, " "), strings.Join(d.ProviderIDs, " "), d.Detail})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
