// Command changelog brings the contract changelog up to date with the
// service as built (spec 9.11): it compares each operation's fingerprint and
// each tool's with the committed baseline (http/contract/baseline.json),
// appends a dated entry to http/contract/changelog.json for every operation
// and tool added, moved or removed, and for every deprecation and meaning
// change of the registry not yet announced, and writes the built surface as
// the new baseline. Review the entries (say in each note what changed for
// clients) and commit both files with the change.
//
// Usage, from the repository (or `make changelog`):
//
//	go run ./cmd/changelog [-date YYYY-MM-DD] [-check]
//
// -check writes nothing and fails, as `make test` does
// (TestChangelogIsCurrent), when the files do not account for the service.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	httpapi "phonefleet/http"
	"phonefleet/http/contract"
	"phonefleet/mcp"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "changelog:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("changelog", flag.ContinueOnError)
	fs.SetOutput(stdout)
	date := fs.String("date", time.Now().UTC().Format(time.DateOnly), "the day the new entries are dated (UTC)")
	dir := fs.String("dir", "", "the directory of baseline.json and changelog.json (default http/contract of the module)")
	check := fs.Bool("check", false, "write nothing; fail when the files do not account for the service")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: go run ./cmd/changelog [-date YYYY-MM-DD] [-check] [-dir DIR]")
		fmt.Fprintln(stdout, "Records in http/contract/changelog.json every operation and tool added, moved or removed since")
		fmt.Fprintln(stdout, "http/contract/baseline.json, and every deprecation and meaning change of the registry, then")
		fmt.Fprintln(stdout, "writes the new baseline. Review the entries and commit both files.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		*dir = filepath.Join(root, "http", "contract")
	}
	built, err := builtSurface()
	if err != nil {
		return err
	}
	reg := contract.Current().Registry
	if *check {
		baseline, log, err := readFiles(*dir)
		if err != nil {
			return err
		}
		if err := contract.Check(built, baseline, log, reg); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "the changelog accounts for the built service")
		return nil
	}
	return generate(*dir, built, reg, *date, stdout)
}

// builtSurface is the service as built: the fingerprints of the OpenAPI
// document it serves and of the tools it lists.
func builtSurface() (contract.Surface, error) {
	doc, err := httpapi.OpenAPIDocument()
	if err != nil {
		return contract.Surface{}, err
	}
	ops, err := httpapi.Fingerprints(doc)
	if err != nil {
		return contract.Surface{}, err
	}
	s, err := mcp.New(mcp.Deps{})
	if err != nil {
		return contract.Surface{}, err
	}
	defer s.Close()
	tools, err := s.ToolFingerprints()
	if err != nil {
		return contract.Surface{}, err
	}
	return contract.Surface{Operations: ops, Tools: tools}, nil
}

// generate brings the files in dir up to date with built and reg, dating
// new entries date, and reports what it added.
func generate(dir string, built contract.Surface, reg contract.Registry, date string, stdout io.Writer) error {
	baseline, log, err := readFiles(dir)
	if err != nil {
		return err
	}
	g, err := contract.Generate(built, baseline, log, reg, date)
	if err != nil {
		return err
	}
	if len(g.New) == 0 {
		fmt.Fprintln(stdout, "nothing changed: the changelog accounts for the built service")
		return nil
	}
	for _, f := range []struct {
		name string
		v    any
	}{{contract.BaselineFile, g.Baseline}, {contract.ChangelogFile, g.Changelog}} {
		b, err := contract.MarshalFile(f.v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), b, 0o644); err != nil {
			return err
		}
	}
	noun := "entries"
	if len(g.New) == 1 {
		noun = "entry"
	}
	fmt.Fprintf(stdout, "%d new %s in %s:\n", len(g.New), noun, filepath.Join(dir, contract.ChangelogFile))
	for _, e := range g.New {
		name := e.Operation
		if e.Tool != "" {
			name = "tool " + e.Tool
		}
		fmt.Fprintf(stdout, "  %s %-10s %s\n", e.Date, e.Kind, name)
	}
	fmt.Fprintln(stdout, "Review them: say in each note what changed for clients; a breaking change (a rename, a removal, a new")
	fmt.Fprintln(stdout, "required parameter) is deprecated first, with a sunset (spec 9.8c). Then commit both files.")
	return nil
}

func readFiles(dir string) (contract.Surface, contract.Changelog, error) {
	rawBase, err := os.ReadFile(filepath.Join(dir, contract.BaselineFile))
	if err != nil {
		return contract.Surface{}, contract.Changelog{}, err
	}
	rawLog, err := os.ReadFile(filepath.Join(dir, contract.ChangelogFile))
	if err != nil {
		return contract.Surface{}, contract.Changelog{}, err
	}
	baseline, err := contract.ParseBaseline(rawBase)
	if err != nil {
		return contract.Surface{}, contract.Changelog{}, err
	}
	log, err := contract.ParseChangelog(rawLog)
	if err != nil {
		return contract.Surface{}, contract.Changelog{}, err
	}
	return baseline, log, nil
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run it from the repository")
		}
		dir = parent
	}
}
