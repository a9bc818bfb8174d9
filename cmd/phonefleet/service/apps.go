package service

import (
	"context"

	"phonefleet/commands/apps"
	"phonefleet/projections"
	"phonefleet/workers"
)

// appProjections are the read models of the app store and library.
func appProjections() []projections.Projection {
	return []projections.Projection{projections.Apps{}}
}

// wireApps builds the app store and library over the fleet, with the
// deployment's catalog (SERVICE_APP_CATALOG_FILE, or the embedded one).
func (a *App) wireApps(context.Context) error {
	catalog, dir, err := apps.LoadCatalog(a.cfg.AppCatalogFile)
	if err != nil {
		return err
	}
	a.capabilities.Apps = apps.New(apps.Config{Store: a.store, Catalog: catalog, CatalogDir: dir,
		Devices: a.capabilities.Fleet, ReadModels: a.runner})
	return nil
}

// serveApps adds the worker that installs and reads devices for the
// tracked requests, through the application object.
func (a *App) serveApps(context.Context) error {
	a.workers = append(a.workers, a.appWorker().Run)
	return nil
}

func (a *App) appWorker() workers.AppWork {
	return workers.AppWork{Work: a.app.Apps.RunDeviceWork, Pool: a.db.Pool, Logger: a.logger.With("worker", "app_work")}
}
