package service

import (
	"context"
	"fmt"

	"phonefleet/commands/gateways"
	"phonefleet/internal/identity"
	"phonefleet/internal/releases"
	"phonefleet/projections"
)

// gatewayProjections are the read models of gateways.
func gatewayProjections() []projections.Projection {
	return []projections.Projection{projections.Gateways{}}
}

// wireGateways builds gateway enrollment, credentials and releases (issue
// 14). Codes' and credentials' secrets are hashed with the API keys'
// hasher (the same server pepper, shared by every instance). A releases
// manifest (SERVICE_RELEASES_FILE) is validated here, so an invalid one
// stops the start with one line naming the entry.
func (a *App) wireGateways(context.Context) error {
	pepper, path, err := identity.LoadOrCreatePepper(a.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("API key pepper: %w", err)
	}
	hasher, err := identity.NewHasher(pepper)
	if err != nil {
		return fmt.Errorf("API key pepper %s: %w", path, err)
	}
	var manifest *releases.File
	if a.cfg.ReleasesFile != "" {
		if manifest, err = releases.Load(a.cfg.ReleasesFile, a.cfg.Mode == "local"); err != nil {
			return err
		}
	}
	a.capabilities.Gateways = gateways.New(gateways.Config{Store: a.store, Hasher: hasher, Releases: manifest,
		Logger: a.logger.With("component", "gateways"), ReadModels: a.runner})
	return nil
}
