package app

import "context"

// runWorkers are the workers of runs: the built-in executor and the
// deadline sweep. They send their commands through the application
// object, which is built after every capability.
func (a *App) runWorkers() []func(ctx context.Context) {
	return nil
}
