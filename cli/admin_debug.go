package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/coupond/coupond/atomicfile"
)

// profileKinds are the profiles "admin debug pprof" takes.
var profileKinds = map[string]string{
	"cpu":       "where CPU time goes, sampled for --seconds",
	"heap":      "live heap and allocations since start",
	"goroutine": "every goroutine's stack",
	"mutex":     "contended locks over --seconds (holders' stacks)",
	"block":     "time goroutines waited on channels, locks and selects over --seconds",
}

// pprofCmd takes a runtime profile of the running server through the admin
// socket and writes it to --out. The profile is taken inside the server
// (the command line is forwarded there); only this client writes the file,
// whole (atomicfile) and with mode 0600: a profile that fails or is
// interrupted leaves whatever file was at --out as it was, never a part.
// With --json it prints the kind, the file and its size on stdout.
func pprofCmd(a *app) *cobra.Command {
	var kind, outPath string
	var seconds int
	cmd := leafCmd("pprof --kind cpu|heap|goroutine|mutex|block [--seconds N] --out FILE", "Take a profile of the running server; read it with 'go tool pprof FILE'", func(cmd *cobra.Command) error {
		if _, ok := profileKinds[kind]; !ok {
			return fmt.Errorf("--kind: want cpu, heap, goroutine, mutex or block, got %q", kind)
		}
		if seconds < 1 || seconds > 600 {
			return fmt.Errorf("--seconds: want 1 to 600, got %d", seconds)
		}
		if a.live != nil {
			return writeProfile(cmd, kind, time.Duration(seconds)*time.Second, cmd.OutOrStdout())
		}
		if outPath == "" {
			return fmt.Errorf("--out: required")
		}
		// A directory would be found only at the end, after the sampling,
		// as "rename DIR.tmp DIR: file exists", the profile first written
		// beside it in its parent.
		if st, err := os.Stat(outPath); err == nil && st.IsDir() {
			return fmt.Errorf("--out %s is a directory: give the file to write the profile to", outPath)
		}
		sock := filepath.Join(a.dataDir, adminSocket)
		conn, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			if aerr := accessError(a.dataDir, err); aerr != nil {
				return aerr // a server may run: this user cannot tell
			}
			return fmt.Errorf("no coupond serves %s: profiles come from a running server", sock)
		}
		conn.Close()
		if err := serverOwnerError(a.dataDir, sock); err != nil {
			return err
		}
		f, err := atomicfile.Create(outPath, 0o600)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		defer f.Abort()
		if err := forwardAdmin(cmd.Context(), sock, adminWaitOf(cmd), a.args, f, cmd.ErrOrStderr()); err != nil {
			return err
		}
		if err := f.Commit(); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		if jsonFlag(cmd) {
			st, err := os.Stat(outPath)
			if err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			return printJSON(cmd.OutOrStdout(), map[string]any{"kind": kind, "out": outPath, "bytes": st.Size()})
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s profile written to %s; read it with: go tool pprof -top %s\n", kind, outPath, outPath)
		return nil
	})
	fl := cmd.Flags()
	fl.StringVar(&kind, "kind", "cpu", "cpu, heap, goroutine, mutex or block")
	fl.IntVar(&seconds, "seconds", 30, "cpu, mutex, block: how long to sample")
	fl.StringVar(&outPath, "out", "", "file to write (pprof format)")
	return cmd
}

// writeProfile takes the profile inside the server. Mutex and block
// profiling are off in serve (they cost on every contended lock); they are
// turned on for the sampling window only.
func writeProfile(cmd *cobra.Command, kind string, d time.Duration, w io.Writer) error {
	wait := func() error {
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(d):
			return nil
		}
	}
	switch kind {
	case "cpu":
		if err := pprof.StartCPUProfile(w); err != nil {
			return fmt.Errorf("cpu profile: %w", err) // another one is running
		}
		err := wait()
		pprof.StopCPUProfile()
		return err
	case "mutex":
		prev := runtime.SetMutexProfileFraction(5)
		defer runtime.SetMutexProfileFraction(prev)
		if err := wait(); err != nil {
			return err
		}
	case "block":
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		defer runtime.SetBlockProfileRate(0)
		if err := wait(); err != nil {
			return err
		}
	}
	return pprof.Lookup(kind).WriteTo(w, 0)
}
