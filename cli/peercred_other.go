//go:build !linux

package cli

import (
	"net"
)

// peerOf cannot learn a peer's credentials on this platform: the socket's
// 0600 mode is then the only guard, and the audit log records uid -1.
func peerOf(net.Conn) (peer, error) { return peer{UID: -1, PID: -1}, nil }

// openFileLimit is not known on this platform.
func openFileLimit() (uint64, bool) { return 0, false }
