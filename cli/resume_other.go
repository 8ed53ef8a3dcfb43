//go:build !linux

package cli

import (
	"errors"
	"net"
	"os"
)

// resumeSupported: serve restarts itself in place only on Linux.
const resumeSupported = false

func listenerForExec(net.Listener) (*os.File, error) {
	return nil, errors.New("restart in place: only on Linux")
}

func selfExecutable() (string, error) { return "", errors.New("restart in place: only on Linux") }

func execSelf(*os.File, string, string) error { return errors.New("restart in place: only on Linux") }

func isSocket(int) bool { return false }

func freeInodes(string) (uint64, bool) { return 0, false }
