package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"phonefleet/receiptchain"
)

// TestEveryCommandDescribesItself: `phonefleet help` lists every command
// (receipts verify included), and `<command> -h` answers with the
// command's own usage, its own flags and only the configuration it reads,
// exiting 0 without running it.
func TestEveryCommandDescribesItself(t *testing.T) {
	var list bytes.Buffer
	if err := run(context.Background(), []string{"help"}, &list); err != nil {
		t.Fatalf("help: %v", err)
	}
	for _, c := range cliCommands() {
		if !strings.Contains(list.String(), "  "+c.words+" ") {
			t.Errorf("help does not list %q:\n%s", c.words, list.String())
		}
		t.Run(c.words, func(t *testing.T) {
			for _, h := range []string{"-h", "--help"} {
				var out bytes.Buffer
				args := append(strings.Fields(c.words), h)
				if err := run(context.Background(), args, &out); err != nil {
					t.Fatalf("%v: got %v; want the help and no error", args, err)
				}
				got := out.String()
				if !strings.HasPrefix(got, strings.SplitN(c.help, "\n", 2)[0]) {
					t.Errorf("%v: got\n%s\nwant the command's own usage first", args, got)
				}
				if c.flags != nil {
					own := flag.NewFlagSet(c.words, flag.ContinueOnError)
					c.flags(own)
					own.VisitAll(func(f *flag.Flag) {
						if !strings.Contains(got, "  -"+f.Name) {
							t.Errorf("%v: the help does not describe the flag -%s", args, f.Name)
						}
					})
				}
				reads := strings.Contains(got, "-database-url")
				if wants := len(c.settings) > 0; reads != wants {
					t.Errorf("%v: describes the database setting %v; want %v", args, reads, wants)
				}
				if strings.Contains(got, "-stripe-secret-key") != (c.words == "serve" || c.words == "fulfilments reconcile") {
					t.Errorf("%v: describes settings the command does not read:\n%s", args, got)
				}
			}
		})
	}
	if err := run(context.Background(), []string{"help", "receipts", "verify"}, &list); err != nil {
		t.Fatalf("help receipts verify: %v", err)
	}
}

// TestReceiptsVerifyTakesTheFileAsAnArgument: the export is named as an
// argument or with --file, flags before or after it; the head the check
// prints (SEQ:HASH) is taken back by --head.
func TestReceiptsVerifyTakesTheFileAsAnArgument(t *testing.T) {
	head := receiptchain.Start()
	var lines [][]byte
	for i, key := range []string{"a/b", "c?d"} {
		_, line, next, err := receiptchain.Next("org_cli", head, "action.requested",
			[]byte(`{"idempotencyKey":"`+key+`","state":"pending","n":`+string(rune('1'+i))+`}`), key)
		if err != nil {
			t.Fatal(err)
		}
		head, lines = next, append(lines, line)
	}
	end, err := receiptchain.EndLine("org_cli", head)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "export.ndjson")
	if err := os.WriteFile(path, append(bytes.Join(append(lines, end), []byte("\n")), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	var first bytes.Buffer
	if err := run(context.Background(), []string{"receipts", "verify", path}, &first); err != nil {
		t.Fatalf("receipts verify FILE: %v\n%s", err, first.String())
	}
	wantHead := "head 2:" + head.Hash
	if !strings.Contains(first.String(), "OK: 2 entries") || !strings.Contains(first.String(), wantHead) {
		t.Fatalf("got\n%s\nwant OK and %q", first.String(), wantHead)
	}
	for _, args := range [][]string{
		{"receipts", "verify", "--file", path},
		{"receipts", "verify", "--file=" + path, "--head", "2:" + head.Hash},
		{"receipts", "verify", path, "--head", "2:" + head.Hash},
		{"receipts", "verify", "--head=2:" + head.Hash, path},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out); err != nil || out.String() != first.String() {
			t.Errorf("%v: got %v\n%s\nwant the same answer as with FILE", args, err, out.String())
		}
	}
	for _, args := range [][]string{
		{"receipts", "verify", path, path},
		{"receipts", "verify", "--file", path, path},
		{"receipts", "verify", path, "--head", "two:" + head.Hash},
	} {
		if err := run(context.Background(), args, &bytes.Buffer{}); exitCode(err) != 2 {
			t.Errorf("%v: got %v (exit %d); want a usage error", args, err, exitCode(err))
		}
	}
	var out bytes.Buffer
	err = run(context.Background(), []string{"receipts", "verify", path, "--head", "3:" + head.Hash}, &out)
	if exitCode(err) != 1 || !strings.Contains(out.String(), "removed from its end") {
		t.Errorf("a head beyond the export: got %v\n%s\nwant exit 1 naming entries removed from its end", err, out.String())
	}
}
