package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/commands/checkpoints"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/internal/adb"
	"phonefleet/projections"
)

const devicesUsage = `usage: phonefleet devices add --org ORG --backend sim|robot --count N [--model MODEL]
       phonefleet devices add --org ORG --backend adb --serial SERIAL [--model MODEL]

Registers devices (as events) for an organisation. With --backend sim they are
virtual phones driven by the service. With --backend adb, SERIAL is the device's
adb serial (as "adb devices" lists it) on the adb server at SERVICE_ADB_ADDR; its
model is read from the device when the server has it, and a serial already
registered is left as it is. Robot devices are recorded and answer
backend_not_implemented until that adapter exists.`

// devicesAddOptions are the flags of `phonefleet devices add`.
type devicesAddOptions struct {
	org, backend, model, serial string
	count                       int
}

func (o *devicesAddOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.org, "org", "", "organisation id to register the devices for (required)")
	fs.StringVar(&o.backend, "backend", domain.BackendSim, "backend kind: sim, adb or robot")
	fs.IntVar(&o.count, "count", 1, "how many devices")
	fs.StringVar(&o.model, "model", "", "device model (sim: Pixel7, Generic or Compact)")
	fs.StringVar(&o.serial, "serial", "", "adb: the device's adb serial")
}

// devicesAddCmd runs `phonefleet devices add`.
func devicesAddCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	var o devicesAddOptions
	return withOperator(ctx, c, args, out, o.register, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		org, backend, model, serial, count := o.org, o.backend, o.model, o.serial, o.count
		if org == "" || fs.NArg() > 0 {
			return usageError{devicesUsage}
		}
		if count < 1 {
			return usageError{"--count must be at least 1"}
		}
		if (backend == domain.BackendADB) != (serial != "") {
			return usageError{"--serial is required with --backend adb, and only there"}
		}
		if serial != "" && model == "" {
			model = adbModel(ctx, fs.Lookup("adb-addr").Value.String(), serial, out)
		}
		ids, err := op.App.Fleet.RegisterDevices.Handle(op.Context(ctx),
			fleet.RegisterDevices{OrgID: org, Backend: backend, Count: count, Model: model, Serial: serial})
		if err != nil {
			return err
		}
		if serial != "" && len(ids) == 0 {
			fmt.Fprintf(out, "adb serial %s is already registered for %s\n", serial, org)
			return nil
		}
		for _, id := range ids {
			fmt.Fprintln(out, id)
		}
		fmt.Fprintf(out, "registered %d %s device(s) for %s\n", len(ids), backend, org)
		return nil
	})
}

// adbModel reads a device's model through the adb server at addr, or
// says why it cannot (the device is registered all the same).
func adbModel(ctx context.Context, addr, serial string, out io.Writer) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := adb.New(addr).Shell(ctx, serial, "getprop ro.product.model")
	if err != nil {
		fmt.Fprintf(out, "note: model not read (%v)\n", err)
		return ""
	}
	return strings.TrimSpace(string(b))
}

// receiptsVerifyCmd runs `phonefleet receipts verify`: offline on an
// export when it names one (FILE, or --file), else against the database.
func receiptsVerifyCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	if file, ok := exportNamed(args); ok {
		return verifyExport(ctx, c, args, file, os.Stdin, out)
	}
	return withOperator(ctx, c, args, out, (&receiptsVerifyOptions{}).register, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		if fs.NArg() > 0 || fs.Lookup("head").Value.String() != "" || fs.Lookup("keys").Value.String() != "" || fs.Lookup("checkpoint").Value.String() != "" {
			return usageError{c.help}
		}
		if err := op.Runner.Ensure(ctx); err != nil {
			return err
		}
		rep, err := projections.VerifyReceipts(ctx, op.Store)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "replayed %d events, up to the receipts read model's checkpoint (position %d)\n", rep.EventsRead, rep.Checkpoint.Position)
		fmt.Fprintf(out, "actions in the history: %d; receipts in the read model: %d\n", rep.Actions, rep.Receipts)
		fmt.Fprintf(out, "states: pending %d (outcome unknown %d), committed %d, failed %d; reviewed %d\n",
			rep.ByState[domain.ReceiptPending], rep.Unknown, rep.ByState[domain.ReceiptCommitted], rep.ByState[domain.ReceiptFailed], rep.Reviewed)
		fmt.Fprintf(out, "actors: %d people, %d API keys\n", rep.People, rep.Keys)
		if rep.OK() {
			fmt.Fprintln(out, "OK: the receipts read model agrees with the event history")
			return nil
		}
		for i, m := range rep.Mismatches {
			if i == 50 {
				fmt.Fprintf(out, "… and %d more\n", len(rep.Mismatches)-50)
				break
			}
			fmt.Fprintln(out, "MISMATCH:", m)
		}
		return fmt.Errorf("receipts verify: %d mismatches", len(rep.Mismatches))
	})
}

const receiptsRotateKeyHelp = `usage: phonefleet receipts rotate-key

Replaces the Ed25519 key that signs receipt checkpoints with a new one,
sealed with the service's server key (run it with the service's
SERVICE_DATA_DIR: a server key that cannot open the active signing key is
refused). The old key stays published by GET /v1/receipts/signing-keys,
valid until the new one's start, so the checkpoints it signed keep
verifying. Running instances sign with the new key from their next
checkpoint on.`

// receiptsRotateKeyCmd runs `phonefleet receipts rotate-key`.
func receiptsRotateKeyCmd(ctx context.Context, c cliCommand, args []string, out io.Writer) error {
	return withOperator(ctx, c, args, out, nil, func(ctx context.Context, fs *flag.FlagSet, op *service.Operator, _ *slog.Logger) error {
		if fs.NArg() > 0 {
			return usageError{c.help}
		}
		key, err := op.App.Checkpoints.RotateSigningKey.Handle(op.Context(ctx), checkpoints.RotateSigningKey{})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "OK: signing key %s (Ed25519, public key %s) signs from %s on\n", key.KeyID, key.PublicKey, key.ValidFrom)
		return nil
	})
}
