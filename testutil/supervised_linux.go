package testutil

import (
	"os/exec"
	"syscall"
)

// stopWithParent has the kernel kill a supervised server should its
// supervisor die without stopping it (a SIGKILL aimed at the supervisor
// itself).
func stopWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
