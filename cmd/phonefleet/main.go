// Command phonefleet is the control plane for a fleet of phones.
//
//	phonefleet serve                     run the service
//	phonefleet migrate                   apply database migrations
//	phonefleet projections status        show each projection's position, lag and state
//	phonefleet projections rebuild NAME  rebuild a projection from position 0, without downtime
//	phonefleet events tail               print the ordered event feed (for auditors)
//	phonefleet version                   print the version
//
// Every command takes the configuration flags (see -h); environment
// variables of the same meaning are read first.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "phonefleet:", err)
		os.Exit(exitCode(err))
	}
}
