package service

import (
	"context"

	"phonefleet/commands/copilot"
	"phonefleet/domain"
	"phonefleet/internal/chat"
	"phonefleet/projections"
	"phonefleet/workers"
)

// copilotProjections are the read models of the copilot.
func copilotProjections() []projections.Projection {
	return []projections.Projection{projections.Copilot{}}
}

// wireCopilot builds the copilot over the provider configured for it
// (SERVICE_COPILOT_*, else the planner's); without one the copilot still
// reads threads, and its chat answers service_unavailable. A hosted
// deployment meters it against the price list's allowance.
func (a *App) wireCopilot(context.Context) error {
	cfg := copilot.Config{Store: a.store, ReadModels: a.runner, Queries: projections.CopilotQueries{DB: a.db.Pool},
		ModelName: a.cfg.CopilotModel, Metered: a.cfg.Mode == "hosted"}
	policy, err := domain.ParseCopilotPolicy(a.cfg.CopilotApprove)
	if err != nil {
		return err
	}
	cfg.Policy = &policy
	// The allowance per subscribed device is on the price list.
	if a.capabilities.Provisioning != nil {
		cfg.TokensPerDevice = a.capabilities.Provisioning.Catalog().CopilotTokensPerDevice
	}
	if a.cfg.CopilotURL != "" {
		m, err := chat.New(chat.Config{BaseURL: a.cfg.CopilotURL, APIKey: a.cfg.CopilotAPIKey, Model: a.cfg.CopilotModel})
		if err != nil {
			return err
		}
		cfg.Model = m
	}
	a.capabilities.Copilot = copilot.New(cfg)
	return nil
}

// serveCopilot stops the turns this process runs when the service
// stops, and sweeps the threads every SERVICE_COPILOT_SWEEP_INTERVAL:
// approvals past expiry, lost turns.
func (a *App) serveCopilot(context.Context) error {
	a.workers = append(a.workers, a.capabilities.Copilot.Run,
		workers.CopilotSweeps{Sweep: a.app.Copilot.SweepThread, Pool: a.db.Pool, Logger: a.logger, Interval: a.cfg.CopilotSweepInterval}.Run)
	return nil
}
