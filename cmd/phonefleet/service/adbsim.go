package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"time"

	"phonefleet/internal/adb"
	"phonefleet/internal/adbsim"
	"phonefleet/internal/config"
	"phonefleet/internal/sim"
)

// adbSimBasePort is where the adb-reachable sim phones listen: 15555,
// 15556, … Fixed ports give them the same adb serials on every start, so
// discovery finds the devices it registered before; they stay clear of
// 5555–5585, which an adb server scans for emulators.
const adbSimBasePort = 15555

// startADBSims serves SERVICE_ADB_SIM_DEVICES sim phones over adb (local
// mode): one device-side adb daemon (internal/adbsim) per phone, and each
// `adb connect`ed to the adb server at SERVICE_ADB_ADDR, which is started
// (adb -P PORT start-server) when none answers there. The phones are then
// ordinary adb devices of that server, for discovery to register and the
// adb backend to drive. The daemons stop, are disconnected, and a server
// started here is killed, when the service shuts down.
func (a *App) startADBSims(ctx context.Context) error {
	n := a.cfg.ADBSimDevices
	if n == 0 || a.cfg.Mode != "local" {
		return nil
	}
	client := adb.New(a.cfg.ADBAddr)
	startedServer, err := ensureADBServer(ctx, client, a.cfg.ADBAddr)
	if err != nil {
		return err
	}
	var daemons []*adbsim.Daemon
	stop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, d := range daemons {
			_ = client.Disconnect(dctx, d.Serial())
			_ = d.Close()
		}
		if startedServer {
			_ = adbCommand(dctx, a.cfg.ADBAddr, "kill-server")
		}
	}
	for i := range n {
		p, err := sim.New(sim.DefaultModel, "adbsim-"+strconv.Itoa(i+1))
		if err != nil {
			stop()
			return err
		}
		d, err := adbsim.Start(p, adbsim.Options{Addr: "127.0.0.1:" + strconv.Itoa(adbSimBasePort+i)})
		if err != nil {
			a.logger.Warn("adb sim phone: fixed port taken, using a free one", "err", err)
			d, err = adbsim.Start(p, adbsim.Options{})
		}
		if err != nil {
			stop()
			return err
		}
		daemons = append(daemons, d)
		if _, err := client.Connect(ctx, d.Serial()); err != nil {
			stop()
			return fmt.Errorf("adb connect %s (the adb server at %s): %w", d.Serial(), a.cfg.ADBAddr, err)
		}
	}
	serials := make([]string, len(daemons))
	for i, d := range daemons {
		serials[i] = d.Serial()
	}
	a.logger.Info("sim phones served over adb", "adb", a.cfg.ADBAddr, "serials", serials)
	a.workers = append(a.workers, func(ctx context.Context) {
		<-ctx.Done()
		stop()
	})
	return nil
}

// ensureADBServer makes sure an adb server answers at addr, starting one
// with the adb command when none does (only on a loopback address, where
// this machine can). It reports whether it started one.
func ensureADBServer(ctx context.Context, client *adb.Client, addr string) (bool, error) {
	if _, err := client.Version(ctx); err == nil {
		return false, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !config.IsLoopback(host) {
		return false, fmt.Errorf("no adb server answers at SERVICE_ADB_ADDR %s: start one there (adb -a -P PORT server nodaemon)", addr)
	}
	if _, err := exec.LookPath("adb"); err != nil {
		return false, errors.New("SERVICE_ADB_SIM_DEVICES needs an adb server: none answers at SERVICE_ADB_ADDR " + addr +
			" and adb is not on PATH to start one (Debian/Ubuntu: apt-get install adb)")
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := adbCommand(sctx, addr, "start-server"); err != nil {
		return false, fmt.Errorf("start the adb server at SERVICE_ADB_ADDR %s: %w", addr, err)
	}
	if _, err := client.Version(ctx); err != nil {
		return false, fmt.Errorf("the adb server started at SERVICE_ADB_ADDR %s does not answer: %w", addr, err)
	}
	return true, nil
}

// adbCommand runs `adb -P PORT args…` for the server at addr. Its output
// is not kept: start-server forks a server that would hold a pipe open.
func adbCommand(ctx context.Context, addr string, args ...string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "adb", append([]string{"-P", port}, args...)...)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("adb -P %s %v: %w", port, args, err)
	}
	return nil
}
