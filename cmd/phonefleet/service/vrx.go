package service

import (
	"context"

	"phonefleet/vrx"
)

// wireVRX builds the device surface /vrx over the application object, so
// every route runs the same run commands as the built-in executor, and
// hands it to the HTTP edge, which mounts it at /vrx/ outside
// authentication (its credential is the run token in the path).
func (a *App) wireVRX(context.Context) error {
	a.deps.VRX = vrx.New(&a.app)
	return nil
}
