//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package pgembed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// platformSupported reports whether Start can work on this system.
func platformSupported() error { return nil }

// serverUser returns the account PostgreSQL runs as: nil (this process's own
// user) unless we are root, then "postgres", or "nobody" when there is no
// "postgres" user.
func serverUser() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		ou := &osUser{name: name, uid: uid, gid: gid, gids: []int{gid}}
		if ids, err := u.GroupIds(); err == nil {
			for _, s := range ids {
				if g, err := strconv.Atoi(s); err == nil && !slices.Contains(ou.gids, g) {
					ou.gids = append(ou.gids, g)
				}
			}
		}
		return ou, nil
	}
	return nil, errors.New("embedded PostgreSQL cannot run as root and there is no system user postgres or nobody to run it as; " +
		"create one (useradd --system postgres), run phonefleet as an ordinary user, or set DATABASE_URL")
}

// setCredential makes cmd run as u (nothing to do when u is nil).
func setCredential(cmd *exec.Cmd, u *osUser) {
	if u == nil {
		return
	}
	groups := make([]uint32, len(u.gids))
	for i, g := range u.gids {
		groups[i] = uint32(g)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: groups},
	}
}

// checkSearchable fails with one line when u cannot reach dir because some
// parent directory is not searchable (x permission) by it.
func checkSearchable(dir string, u *osUser) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("embedded PostgreSQL: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok {
			perm := fi.Mode().Perm()
			var bit fs.FileMode = 0o001
			switch {
			case int(st.Uid) == u.uid:
				bit = 0o100
			case slices.Contains(u.gids, int(st.Gid)):
				bit = 0o010
			}
			if perm&bit == 0 {
				return fmt.Errorf("embedded PostgreSQL must run as the unprivileged user %q because this process runs as root, "+
					"but that user cannot enter %s (mode %04o, owner uid %d), a parent of %s; "+
					"set SERVICE_DATA_DIR to a directory every parent of which it can enter (e.g. /var/lib/phonefleet), or set DATABASE_URL",
					u.name, p, perm, st.Uid, dir)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// chownTree gives dir and everything under it to u, unless dir is already
// u's. Symbolic links are not followed.
func chownTree(dir string, u *osUser) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == u.uid {
		if data, err := os.Lstat(filepath.Join(dir, "data")); err != nil {
			return nil
		} else if st, ok := data.Sys().(*syscall.Stat_t); ok && int(st.Uid) == u.uid {
			return nil
		}
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, u.uid, u.gid)
	})
}

// lockFile takes an exclusive flock on path, waiting while ctx allows (at
// most three minutes), and returns its release.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another process has held %s for 3 minutes", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lockShared takes a shared flock on path, waiting while ctx allows (at
// most three minutes: only a closing process holds it exclusively, for as
// long as it takes to stop the server), and returns the open file that
// holds it; closing the file releases it, and so does the end of the
// process, however it ends.
func lockShared(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another process has held %s for 3 minutes", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tryExclusive converts the flock f holds to an exclusive one without
// waiting, and reports whether it could: whether no other open file holds
// a lock on it.
func tryExclusive(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// processAlive reports whether a process with this id exists and has not
// exited: a zombie (dead, not yet reaped by its parent) is not alive.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if runtime.GOOS != "linux" {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// isPostmasterOf reports whether process pid runs in dataDir, as a
// postmaster does (it changes into its data directory). known is false when
// this cannot be told (no /proc, or no permission).
func isPostmasterOf(pid int, dataDir string) (ours, known bool) {
	if runtime.GOOS != "linux" {
		return false, false
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return false, false
	}
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		return false, false
	}
	return cwd == want, true
}

// relocationRoots are where a cluster goes when the server's user cannot
// reach the directory asked for: a system place that survives reboots
// first, then the temporary directory. Tests point it elsewhere.
var relocationRoots = func() []string {
	return []string{"/var/lib/phonefleet", filepath.Join(os.TempDir(), "phonefleet-postgres")}
}

// reachableDir returns the directory the cluster of dir lives in when u
// runs the server: dir itself (or what it links to) when u can enter every
// parent of it; otherwise a directory of its own under the first usable
// relocation root, named after a hash of dir's absolute path so the same
// dir finds it again. dir then becomes a symbolic link to it when dir is
// free (missing, or an empty directory), so a person looking for the
// cluster finds it, and the move is logged. No directory of the caller is
// opened up to u.
func reachableDir(dir string, u *osUser, logger *slog.Logger) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("embedded PostgreSQL: create %s: %w", filepath.Dir(dir), err)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	unreachable := checkSearchable(dir, u)
	if unreachable == nil {
		return dir, nil
	}
	sum := sha256.Sum256([]byte(dir))
	name := "postgres-" + hex.EncodeToString(sum[:8])
	for _, root := range relocationRoots() {
		if !ownRoot(root) {
			continue
		}
		target := filepath.Join(root, name)
		if checkSearchable(target, u) != nil {
			continue
		}
		if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			continue
		}
		linked := linkTo(dir, target)
		msg := fmt.Sprintf("embedded PostgreSQL placed at %s: it runs as user %q, which cannot enter a parent of %s (left as it is)", target, u.name, dir)
		if linked {
			msg += "; " + dir + " links to it"
		}
		logger.Info(msg, "dir", target, "asked", dir)
		return target, nil
	}
	return "", unreachable
}

// ownRoot makes root (mode 0755, owned by this process's user) if it is
// missing, and reports whether it is usable: a directory of ours that
// nobody else may write to, so no one can plant a cluster in it.
func ownRoot(root string) bool {
	if err := os.Mkdir(root, 0o755); err == nil {
		_ = os.Chmod(root, 0o755) // whatever the umask
	} else if !errors.Is(err, fs.ErrExist) {
		return false
	}
	fi, err := os.Lstat(root)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// linkTo makes dir a symbolic link to target when dir is missing or an
// empty directory, and reports whether dir now leads there.
func linkTo(dir, target string) bool {
	if fi, err := os.Lstat(dir); err == nil {
		if !fi.IsDir() || os.Remove(dir) != nil { // Remove fails unless empty
			return false
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return false
	}
	return os.Symlink(target, dir) == nil
}
