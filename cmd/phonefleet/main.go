// Command phonefleet is the control plane for a fleet of phones: the
// service (phonefleet serve), the gateway a site computer runs (phonefleet
// gateway), and the operator's and auditor's commands (migrate,
// projections status and rebuild, events tail, receipts verify, devices
// add, fulfilments refund and reconcile, login, logout).
//
// phonefleet help lists them; phonefleet <command> -h describes one, its
// own flags and the configuration it reads (an environment variable, and a
// flag of the same meaning that overrides it).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

func main() {
	// SIGINT, SIGTERM and SIGHUP (the terminal went away) cancel the
	// command's context, so that it ends the way it ends on success:
	// deferred closes run, and an embedded cluster the command started is
	// stopped unless someone else uses it. SIGKILL cannot be caught; the
	// next command on the cluster stops what a killed one left running.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// Without a handler, the Go runtime kills the program on a write to a
	// closed pipe on standard output (`phonefleet events tail | head -1`),
	// skipping every deferred close. Received here, the write fails with
	// EPIPE instead and the command ends normally. The signals themselves
	// are dropped: sockets raise SIGPIPE too, and their writes fail anyway.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	out := &stdout{f: os.Stdout}
	err := run(ctx, os.Args[1:], out)
	stop()
	if err != nil && !(out.broken.Load() && errors.Is(err, syscall.EPIPE)) {
		fmt.Fprintln(os.Stderr, "phonefleet:", err)
		os.Exit(exitCode(err))
	}
	// A command whose reader went away (a closed pipe) ends quietly with
	// status 0: the reader has what it wanted.
}

// stdout is the commands' standard output. It notes a write that met a
// closed pipe, so that main tells that end from a failure (a database
// connection's broken pipe is one).
type stdout struct {
	f      *os.File
	broken atomic.Bool
}

func (w *stdout) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		w.broken.Store(true)
	}
	return n, err
}
