package domain

import "context"

// NetworkProxy is a managed proxy a device is put behind: its endpoint and
// the credentials the device presents (Proxy-Authorization Basic).
type NetworkProxy struct {
	ProxyID  string
	Host     string
	Port     int
	Username string
	Password string
}

// NetworkProxyConfigurer is a Backend whose device can be put behind a
// network proxy (the sim's network settings; an Android phone's global
// HTTP proxy setting). nil takes the device off its proxy (direct again).
// Errors: invalid_argument, device_disconnected, backend_command_failed.
type NetworkProxyConfigurer interface {
	SetNetworkProxy(ctx context.Context, p *NetworkProxy) error
}
