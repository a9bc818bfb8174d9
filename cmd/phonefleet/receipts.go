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

const receiptsExportUsage = `usage: phonefleet receipts verify --file EXPORT [--head HASH]

Checks an export of GET /v1/receipts/export offline, without a database:
every entry hashes to its hash, links to the one before it and the export
ends with its end line. Names the first receipt that was altered, removed
or reordered (line number, idempotency key, what is wrong) and exits 1.
--file - reads standard input. --head checks that the chain ends at a head
hash recorded earlier (so entries removed from its end are seen too).`

// wantsExportVerify reports whether `receipts verify` was given --file: the
// offline check of an export, which opens no database.
func wantsExportVerify(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "file" {
			return true
		}
	}
	return false
}

// verifyExport runs `phonefleet receipts verify --file EXPORT`.
func verifyExport(args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("phonefleet receipts verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	file := fs.String("file", "", "the export to check (- for standard input)")
	head := fs.String("head", "", "the head hash the chain must end at (optional)")
	if err := fs.Parse(args); err != nil || *file == "" || fs.NArg() > 0 {
		return usageError{receiptsExportUsage}
	}
	in := stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	rep, err := receiptchain.Verify(in, receiptchain.Options{Head: strings.ToLower(*head)})
	var p *receiptchain.Problem
	if errors.As(err, &p) {
		fmt.Fprintln(out, "FAIL", p.Error())
		return fmt.Errorf("receipts verify: %s: %w", *file, p)
	}
	if err != nil {
		return fmt.Errorf("receipts verify: %s: %w", *file, err)
	}
	fmt.Fprintf(out, "OK: %d entries recording %d receipts of organisation %s; the chain is intact\n", rep.Entries, rep.Receipts, orEmpty(rep.OrgID))
	fmt.Fprintf(out, "head %s\n", rep.HeadHash)
	return nil
}

func orEmpty(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
