package app

import "context"

// wireVRX mounts the device surface /vrx on the HTTP edge.
func (a *App) wireVRX(ctx context.Context) error {
	return nil
}
