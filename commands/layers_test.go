package commands_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The house's rules on imports (docs/architecture.md), checked on the
// packages as built (not their tests):
//
//   - internal/ holds only the parts below the application: nothing under
//     it imports, directly or through another package, the capabilities
//     (commands/…), the surfaces (http/…, mcp, vrx), the workers or the
//     read models (projections).
//   - A capability (commands/<capability>) reaches the devices through the
//     device runtime's port, which speaks domain types: it imports neither
//     the sim nor the backend adapters, directly or through another
//     package (so not the runtime itself either).
//   - A capability depends on another only through a narrow interface it
//     declares, importing the other's package for its request types at
//     most; each such import is listed in allowedCapabilityImports, so a
//     new one is added on purpose, with its reason.

// above are the layers nothing under internal/ may import.
var above = []string{
	"phonefleet/commands",
	"phonefleet/http",
	"phonefleet/workers",
	"phonefleet/mcp",
	"phonefleet/vrx",
	"phonefleet/projections",
}

// devicesBelowThePort are the packages a capability reaches only through
// the device runtime's port.
var devicesBelowThePort = []string{
	"phonefleet/internal/sim",
	"phonefleet/internal/backends",
}

// allowedCapabilityImports are the imports from one capability to
// another, each with why.
var allowedCapabilityImports = map[[2]string]string{
	{"apps", "fleet"}: "installations lease, act on and read devices through apps.Devices, which *fleet.Fleet satisfies, " +
		"sending the fleet's request types",
	{"copilot", "fleet"}: "a turn observes, leases and acts on its device through the application's fleet entry points (copilot.Devices), " +
		"sending the fleet's request types, so the copilot's actions are the REST and MCP ones",
	{"copilot", "runs"}: "a turn's start_run tool starts a run as the person through the application's StartRun (copilot.Devices.StartRun), " +
		"whose request it builds",
	{"console", "keys"}: "CLI sign-in mints its key, with the approval in the key's unit, through the application's key command (console.KeyMinter)",
	{"runs", "fleet"}: "a run holds, observes and acts on its device through runs.Devices, which *fleet.Fleet satisfies, " +
		"sending the fleet's request types",
	{"schedules", "runs"}: "a schedule's firing starts a run through the application's StartRun, whose request it builds",
}

// notCapabilities are the packages under commands/ that are no
// capability: the shared handler shape.
var notCapabilities = []string{"cqrs"}

type listedPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// listPackages lists every package of the module with its imports and
// dependencies, as `go list` sees them (once for the tests of this file).
func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	pkgs, err := listed()
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

var listed = sync.OnceValues(func() ([]listedPackage, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is needed to list the packages: %w", err)
	}
	cmd := exec.Command(goBin, "list", "-json=ImportPath,Imports,Deps", "phonefleet/...")
	cmd.Dir = ".." // the module's root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list: %w\n%s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		return nil, errors.New("go list listed no package")
	}
	return pkgs, nil
})

// within reports whether path is root or a package below it.
func within(path, root string) bool {
	return path == root || strings.HasPrefix(path, root+"/")
}

// capabilityOf names the capability path belongs to, if it is one.
func capabilityOf(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "phonefleet/commands/")
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, "/")
	return name, !slices.Contains(notCapabilities, name)
}

func TestInternalImportsNothingAbove(t *testing.T) {
	for _, p := range listPackages(t) {
		if !within(p.ImportPath, "phonefleet/internal") {
			continue
		}
		for _, dep := range p.Deps {
			for _, layer := range above {
				if within(dep, layer) {
					t.Errorf("%s depends on %s (a layer above internal/): move the part that needs it up, where its imports point down", p.ImportPath, dep)
				}
			}
		}
	}
}

func TestCapabilitiesReachDevicesThroughThePort(t *testing.T) {
	for _, p := range listPackages(t) {
		if _, ok := capabilityOf(p.ImportPath); !ok {
			continue
		}
		for _, dep := range p.Deps {
			for _, below := range devicesBelowThePort {
				if within(dep, below) {
					t.Errorf("%s depends on %s: a capability reaches devices through the device runtime's port (commands/fleet.DeviceRuntime), in domain types", p.ImportPath, dep)
				}
			}
		}
	}
}

func TestCapabilitiesImportOthersOnlyAsListed(t *testing.T) {
	used := map[[2]string]bool{}
	for _, p := range listPackages(t) {
		from, ok := capabilityOf(p.ImportPath)
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			to, ok := capabilityOf(imp)
			if !ok || to == from {
				continue
			}
			pair := [2]string{from, to}
			used[pair] = true
			if _, allowed := allowedCapabilityImports[pair]; !allowed {
				t.Errorf("%s imports %s: depend on another capability through a narrow interface of your own, "+
					"or add the pair to allowedCapabilityImports with its reason", p.ImportPath, imp)
			}
		}
	}
	for pair := range allowedCapabilityImports {
		if !used[pair] {
			t.Errorf("allowedCapabilityImports lists %s → %s, which no longer happens: remove it", pair[0], pair[1])
		}
	}
}
