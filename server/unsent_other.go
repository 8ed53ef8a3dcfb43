//go:build !linux

package server

import "net"

// boundUnsent does nothing here: TCP_NOTSENT_LOWAT is Linux's (see
// unsent_linux.go).
func boundUnsent(net.Conn) {}
