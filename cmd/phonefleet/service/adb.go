package service

import (
	"phonefleet/workers"
)

// serveADBDiscovery adds adb device discovery (SERVICE_ADB_DISCOVER, local
// mode): every device the adb server at SERVICE_ADB_ADDR reports is
// registered in the local organisation, and recorded offline and online
// as it comes and goes. The adb devices themselves are driven by whichever
// process holds the device host claim, discovery or not; discovery only
// decides which serials are registered.
func (a *App) serveADBDiscovery() {
	// Sim phones served over adb (SERVICE_ADB_SIM_DEVICES) are there to be
	// seen in the fleet: they turn discovery on.
	if !a.cfg.ADBDiscover && a.cfg.ADBSimDevices == 0 || a.cfg.Mode != "local" || a.orgID == "" {
		return
	}
	a.logger.Info("adb discovery on", "adb", a.cfg.ADBAddr)
	adb := a.devices.ADB
	a.workers = append(a.workers, workers.ADBDiscovery{Client: adb.Client(), OrgID: a.orgID, Pool: a.db.Pool, Logger: a.logger,
		Register: a.app.Fleet.RegisterDevices, Record: a.app.Fleet.RecordDeviceConnection,
		Changed: func(deviceID string, _ bool) { adb.Forget(deviceID) }}.Run)
}
