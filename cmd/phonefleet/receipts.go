package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"phonefleet/receiptchain"
)

const receiptsVerifyHelp = `usage: phonefleet receipts verify FILE [--head SEQ:HASH] [--keys KEYS] [--checkpoint CP]...
       phonefleet receipts verify

With FILE (or --file FILE; - reads standard input), checks an export of GET
/v1/receipts/export offline, without a database: every line is in the
canonical form the export writes (RFC 8785 JSON), every entry hashes to its
hash, links to the one before it, and the export ends with its end line. It
names the first receipt that was altered, removed, reordered or forged
(line number, idempotency key, what is wrong) and exits 1. --head checks
that the chain extends a head recorded earlier (SEQ:HASH, as this command
prints it): entries removed from the end are named removed, a chain
rewritten and re-hashed from an earlier entry is named forged. With a hash
alone the two cannot be told apart.

Signed checkpoints: every {"checkpoint":…} line of the export must sign the
entry it follows (its number and hash). --keys (a file, or the URL, of GET
/v1/receipts/signing-keys) checks their signatures against the published
keys; without it they are checked against the chain only, and the OK line
says the signatures were not checked. --checkpoint (repeatable) names a
checkpoint held apart from the export: a webhook delivery of
receipt.checkpoint_signed, one checkpoint, or a page of GET
/v1/receipts/checkpoints. Its entry must hash as it says, and an export
ending before its entry is refused as cut short (removed), even when its
end line was rewritten to match: no --head is needed for that.

Without FILE, replays the event history and checks the receipts read model
against it: the same actions, each with the same organisation, key,
device, state, outcome, actor and review. Exits 1 if they disagree.`

// receiptsVerifyOptions are the flags of `phonefleet receipts verify`.
type receiptsVerifyOptions struct {
	file, head, keys string
	checkpoints      fileList
}

func (o *receiptsVerifyOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.file, "file", "", "the export to check (- for standard input); the same as FILE")
	fs.StringVar(&o.head, "head", "", "the head the chain must extend, SEQ:HASH as an earlier check printed it (a hash alone is accepted)")
	fs.StringVar(&o.keys, "keys", "", "the published signing keys: a file, or the https URL, of GET /v1/receipts/signing-keys")
	fs.Var(&o.checkpoints, "checkpoint", "a checkpoint held apart from the export (a webhook delivery, a checkpoint, or a page of them); repeatable")
}

// fileList is a repeatable flag.
type fileList []string

func (l *fileList) String() string     { return strings.Join(*l, ",") }
func (l *fileList) Set(v string) error { *l = append(*l, v); return nil }

// exportNamed reports the export a `receipts verify` command line names:
// its first argument that is neither a flag nor a flag's value (every flag
// of the command takes a value), or --file's value.
func exportNamed(args []string) (string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return args[i+1], true
			}
			return "", false
		case a == "-" || !strings.HasPrefix(a, "-"):
			return a, true
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
			i++
		}
		if name == "file" {
			return value, true
		}
	}
	return "", false
}

// verifyExport runs `phonefleet receipts verify FILE`.
func verifyExport(ctx context.Context, c cliCommand, args []string, file string, stdin io.Reader, out io.Writer) error {
	var o receiptsVerifyOptions
	fs := flag.NewFlagSet("phonefleet receipts verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { _ = printHelp(out, c) }
	o.register(fs)
	// Flags may come before and after FILE.
	var positional []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{fmt.Sprintf("%v\n\n%s", err, c.help)}
		}
		if rest = fs.Args(); len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			positional = append(positional, rest[1:]...)
			break
		}
		positional, rest = append(positional, rest[0]), rest[1:]
	}
	if len(positional) > 1 || len(positional) == 1 && o.file != "" {
		return usageError{c.help}
	}
	head, err := receiptchain.ParseHead(o.head)
	if err != nil {
		return usageError{fmt.Sprintf("--head: %v\n\n%s", err, c.help)}
	}
	opt := receiptchain.Options{Head: head}
	if o.keys != "" {
		if opt.Keys, err = readKeySet(ctx, o.keys); err != nil {
			return fmt.Errorf("receipts verify: --keys %s: %w", o.keys, err)
		}
	}
	for _, f := range o.checkpoints {
		cps, err := readCheckpoints(f)
		if err != nil {
			return fmt.Errorf("receipts verify: --checkpoint %s: %w", f, err)
		}
		opt.Checkpoints = append(opt.Checkpoints, cps...)
	}
	in := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	rep, err := receiptchain.Verify(in, opt)
	var p *receiptchain.Problem
	if errors.As(err, &p) {
		fmt.Fprintln(out, "FAIL", p.Error())
		return fmt.Errorf("receipts verify: %s: %w", file, p)
	}
	if err != nil {
		return fmt.Errorf("receipts verify: %s: %w", file, err)
	}
	fmt.Fprintf(out, "OK: %d entries recording %d receipts of organisation %s; the chain is intact\n", rep.Entries, rep.Receipts, orEmpty(rep.OrgID))
	if n := rep.Checkpoints + rep.Held; n > 0 {
		checked := "signatures checked against the published keys"
		if !rep.SignaturesChecked {
			checked = "signatures NOT checked (give --keys)"
		}
		fmt.Fprintf(out, "checkpoints: %d in the export, %d held apart, each matching the chain; %s; the latest counts %d entries, signed at %s by %s\n",
			rep.Checkpoints, rep.Held, checked, rep.Latest.Entries, rep.Latest.SignedAt, rep.Latest.KeyID)
	}
	fmt.Fprintf(out, "head %d:%s\n", rep.Entries, rep.HeadHash)
	return nil
}

// readKeySet reads the published signing keys from a file or an https
// (or, for a local service, http) URL.
func readKeySet(ctx context.Context, src string) (*receiptchain.KeySet, error) {
	var data []byte
	if strings.HasPrefix(src, "https://") || strings.HasPrefix(src, "http://") {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("answered %s", resp.Status)
		}
		if data, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20)); err != nil {
			return nil, err
		}
	} else {
		var err error
		if data, err = os.ReadFile(src); err != nil {
			return nil, err
		}
	}
	var ks receiptchain.KeySet
	if err := json.Unmarshal(data, &ks); err != nil {
		return nil, fmt.Errorf("not the answer of GET /v1/receipts/signing-keys: %w", err)
	}
	if len(ks.Keys) == 0 {
		return nil, errors.New("no keys in it")
	}
	return &ks, nil
}

// readCheckpoints reads checkpoints held apart: a webhook delivery body
// ({"data": checkpoint}), a page ({"checkpoints": [...]}), or one
// checkpoint.
func readCheckpoints(file string) ([]receiptchain.Checkpoint, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Event       string                    `json:"event"`
		Data        *receiptchain.Checkpoint  `json:"data"`
		Checkpoints []receiptchain.Checkpoint `json:"checkpoints"`
		receiptchain.Checkpoint
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	switch {
	case doc.Data != nil:
		if doc.Event != "" && doc.Event != "receipt.checkpoint_signed" {
			return nil, fmt.Errorf("a delivery of %s, not of receipt.checkpoint_signed", doc.Event)
		}
		return []receiptchain.Checkpoint{*doc.Data}, nil
	case doc.Checkpoints != nil:
		return doc.Checkpoints, nil
	case doc.Signature != "":
		return []receiptchain.Checkpoint{doc.Checkpoint}, nil
	}
	return nil, errors.New("no checkpoint in it")
}

func orEmpty(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
