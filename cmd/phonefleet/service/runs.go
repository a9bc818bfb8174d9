package service

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

// wireRuns builds the run capability over the fleet.
func (a *App) wireRuns(context.Context) error {
	a.capabilities.Runs = runs.New(runs.Config{Store: a.store, ReadModels: a.runner, Devices: a.capabilities.Fleet, BaseURL: a.baseURL})
	return nil
}

// baseURL is {base_url}: the configured public URL, or the address the
// service listens on when none was configured (a test's port 0; New binds
// the listener before it builds anything).
func (a *App) baseURL() string {
	if a.cfg.PublicURL == "" || a.cfg.PublicURL == "http://"+a.cfg.Addr {
		return "http://" + a.ln.Addr().String()
	}
	return strings.TrimRight(a.cfg.PublicURL, "/")
}
