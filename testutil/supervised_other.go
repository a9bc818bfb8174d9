//go:build !linux

package testutil

import "os/exec"

// stopWithParent does nothing where the kernel has no parent-death
// signal; the supervisor stops the server when the test process ends.
func stopWithParent(*exec.Cmd) {}
