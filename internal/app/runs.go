package app

import (
	"context"
	"strings"

	"phonefleet/commands/runs"
	"phonefleet/projections"
)

// runProjections are the read models of runs.
func runProjections() []projections.Projection {
	return []projections.Projection{projections.Runs{}}
}

// wireRuns builds the run capability over the fleet and its workers (the
// built-in executor, the deadline sweep).
func (a *App) wireRuns(ctx context.Context) error {
	a.capabilities.Runs = runs.New(runs.Config{Store: a.store, ReadModels: a.runner, Devices: a.capabilities.Fleet, BaseURL: a.baseURL})
	a.workers = append(a.workers, a.runWorkers()...)
	return nil
}

// baseURL is {base_url}: the configured public URL, or the address the
// service actually listens on when none was configured (a test's port 0).
func (a *App) baseURL() string {
	if a.cfg.PublicURL == "" || a.cfg.PublicURL == "http://"+a.cfg.Addr {
		if a.ln != nil {
			return "http://" + a.ln.Addr().String()
		}
	}
	return strings.TrimRight(a.cfg.PublicURL, "/")
}
