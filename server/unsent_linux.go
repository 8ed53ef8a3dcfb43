//go:build linux

package server

import (
	"net"

	"golang.org/x/sys/unix"
)

// unsentLowWater is the most unsent bytes the kernel queues for a
// connection (TCP_NOTSENT_LOWAT) before a write waits.
const unsentLowWater = 16 << 10

// boundUnsent bounds the bytes c's kernel send buffer holds unsent. By
// default that buffer grows to megabytes and wakes a writer blocked on it
// only once about a third of it has drained: a client that keeps reading,
// slowly, then lets no write through within the write stall bound and is
// cut off. With the bound a write waits only for the bytes ahead of it
// within unsentLowWater, and a slow client holds less kernel memory. A
// connection that is not TCP, or refuses the option, is left as it is.
func boundUnsent(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, unsentLowWater)
	})
}
