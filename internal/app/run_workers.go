package app

import (
	"context"

	"phonefleet/internal/planner"
	"phonefleet/workers"
)

// runWorkers are the workers of runs: the built-in executor and the
// deadline sweep. They send their commands through the application
// object, which is built after every capability, so they read a.app only
// once the service runs.
func (a *App) runWorkers() []func(ctx context.Context) {
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
	// the other instances within reach (wireCluster, which runs later:
	// read when the executor asks), it runs any, its device calls
	// reaching the holder.
	hosting := func() bool { return a.cluster != nil || a.runtime.Hosting() }
	return []func(ctx context.Context){
		func(ctx context.Context) {
			workers.NewRunExecutor(workers.RunExecutorConfig{App: &a.app, Pool: a.db.Pool, LLM: llm,
				Hosting: hosting, Logger: a.logger.With("component", "run-executor")}).Run(ctx)
		},
		func(ctx context.Context) {
			workers.RunDeadlines{End: a.app.Runs.EndOverdueRun, Pool: a.db.Pool, Logger: a.logger}.Run(ctx)
		},
	}
}
