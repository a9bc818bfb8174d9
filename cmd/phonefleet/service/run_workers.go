package service

import (
	"context"

	"phonefleet/internal/planner"
	"phonefleet/workers"
)

// serveRuns adds the workers of runs: the built-in executor and the
// deadline sweep, sending their commands through the application object.
func (a *App) serveRuns(context.Context) error {
	var llm planner.Planner
	if a.cfg.PlannerURL != "" {
		p, err := planner.NewOpenAI(planner.OpenAIConfig{BaseURL: a.cfg.PlannerURL, APIKey: a.cfg.PlannerAPIKey, Model: a.cfg.PlannerModel})
		if err != nil {
			a.logger.Warn("the run planner is not usable; builtin runs follow scripts only", "err", err)
		} else {
			llm = p
		}
	}
	// Alone, this process runs only runs whose devices it drives; with
	// the other instances within reach (SERVICE_NATS_URL), it runs any,
	// its device calls reaching the holder.
	runtime, clustered := a.devices.Runtime, a.cfg.NATSURL != ""
	hosting := func() bool { return clustered || runtime.Hosting() }
	a.workers = append(a.workers,
		workers.NewRunExecutor(workers.RunExecutorConfig{App: &a.app, Pool: a.db.Pool, LLM: llm,
			Hosting: hosting, Logger: a.logger.With("component", "run-executor")}).Run,
		workers.RunDeadlines{End: a.app.Runs.EndOverdueRun, Pool: a.db.Pool, Logger: a.logger}.Run,
	)
	return nil
}
