package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"phonefleet/receiptchain"
)

const receiptsVerifyHelp = `usage: phonefleet receipts verify FILE [--head SEQ:HASH]
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

Without FILE, replays the event history and checks the receipts read model
against it: the same actions, each with the same organisation, key,
device, state, outcome, actor and review. Exits 1 if they disagree.`

// receiptsVerifyOptions are the flags of `phonefleet receipts verify`.
type receiptsVerifyOptions struct {
	file, head string
}

func (o *receiptsVerifyOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.file, "file", "", "the export to check (- for standard input); the same as FILE")
	fs.StringVar(&o.head, "head", "", "the head the chain must extend, SEQ:HASH as an earlier check printed it (a hash alone is accepted)")
}

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
func verifyExport(c cliCommand, args []string, file string, stdin io.Reader, out io.Writer) error {
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
	in := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	rep, err := receiptchain.Verify(in, receiptchain.Options{Head: head})
	var p *receiptchain.Problem
	if errors.As(err, &p) {
		fmt.Fprintln(out, "FAIL", p.Error())
		return fmt.Errorf("receipts verify: %s: %w", file, p)
	}
	if err != nil {
		return fmt.Errorf("receipts verify: %s: %w", file, err)
	}
	fmt.Fprintf(out, "OK: %d entries recording %d receipts of organisation %s; the chain is intact\n", rep.Entries, rep.Receipts, orEmpty(rep.OrgID))
	fmt.Fprintf(out, "head %d:%s\n", rep.Entries, rep.HeadHash)
	return nil
}

func orEmpty(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
