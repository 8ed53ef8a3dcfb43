// Command coupond is the coupon decision engine: one binary that serves the
// v1 API, runs batch jobs, learns, and is operated with "coupond admin".
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/coupond/coupond/cli"
)

func main() {
	// SIGHUP (the terminal that ran "coupond serve" closed) stops it as
	// SIGTERM does, unless it was started ignoring SIGHUP (nohup): asking
	// for the signal would undo that.
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	err := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if _, ok := err.(*cli.ExitError); !ok {
			fmt.Fprintln(os.Stderr, "coupond:", err)
		}
		os.Exit(cli.ExitCode(err))
	}
}
