//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package pgembed

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
)

// platformSupported reports whether Start can work on this system.
func platformSupported() error {
	return errors.New("embedded PostgreSQL is not supported on " + runtime.GOOS + "; set DATABASE_URL to an existing PostgreSQL server")
}

func serverUser() (*osUser, error)                         { return nil, nil }
func setCredential(*exec.Cmd, *osUser)                     {}
func checkSearchable(string, *osUser) error                { return nil }
func chownTree(string, *osUser) error                      { return nil }
func lockFile(context.Context, string) (func(), error)     { return func() {}, nil }
func processAlive(int) bool                                { return false }
func lockShared(context.Context, string) (*os.File, error) { return nil, nil }
func tryExclusive(*os.File) bool                           { return false }
func isPostmasterOf(int, string) (ours, known bool)        { return false, false }

func reachableDir(dir string, _ *osUser, _ *slog.Logger) (string, error) { return dir, nil }
