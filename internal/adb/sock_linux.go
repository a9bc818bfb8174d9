package adb

import (
	"net"
	"syscall"
)

// peerClosed reports, without waiting, whether the other end closed conn
// (a peek that finds end-of-file); a conn it cannot inspect counts as
// open, and a dead one is then found by the next write or read.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil
	})
	return closed
}

// quickAck asks the kernel to acknowledge what arrives next at once. The
// adb server sends a stream's next write only once the last one was
// acknowledged, so a delayed acknowledgement (about 40 ms) would sit
// between a command's output and its end marker. Linux clears the flag
// after use, so it is set before every read.
func quickAck(conn net.Conn) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}
