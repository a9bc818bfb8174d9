//go:build unix

package testutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// detach puts the reaper in a process group of its own.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// checkSharedDir refuses a shared throwaway-cluster directory in the
// world-writable temporary directory that someone else could have planted:
// it must be a real directory owned by this user, or, when we are root, by
// the unprivileged user pgembed gives it to.
func checkSharedDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory; remove it", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	owners := map[int]bool{os.Getuid(): true}
	if os.Getuid() == 0 {
		for _, name := range []string{"postgres", "nobody"} {
			if u, err := user.Lookup(name); err == nil {
				if uid, err := strconv.Atoi(u.Uid); err == nil {
					owners[uid] = true
				}
			}
		}
	}
	if !owners[int(st.Uid)] {
		return fmt.Errorf("%s belongs to uid %d, not to this user; remove it", dir, st.Uid)
	}
	return nil
}
