package service

import (
	"context"

	"phonefleet/mcp"
)

// wireMCP builds the agent tool surface (POST /mcp) over the application
// object, so every tool runs the same command handlers and queries as the
// /v1 routes, and hands it to the HTTP edge.
func (a *App) wireMCP(context.Context) error {
	srv, err := mcp.New(mcp.Deps{
		App:    &a.app,
		Mode:   a.cfg.Mode,
		Logger: a.logger.With("surface", "mcp"),
	})
	if err != nil {
		return err
	}
	a.deps.MCP = srv
	// Stop the transport's session sweeper when the service stops.
	a.workers = append(a.workers, func(ctx context.Context) { <-ctx.Done(); _ = srv.Close() })
	return nil
}
