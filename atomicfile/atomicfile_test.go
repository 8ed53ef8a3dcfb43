package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriteReplacesWholeOrNotAtAll(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := WriteBytes(path, 0o644, []byte("one")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 (owner only)", st.Mode().Perm())
	}
	boom := errors.New("boom")
	err = Write(path, 0o600, func(w io.Writer) error {
		w.Write([]byte("half"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want fn's error", err)
	}
	got, _ := os.ReadFile(path)
	if diff := cmp.Diff("one", string(got)); diff != "" {
		t.Errorf("a failed write changed the file (-want +got):\n%s", diff)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 1 {
		t.Errorf("files left: %v, want only f.json", names)
	}
}

func TestCreateCommitAbort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r")
	a, err := Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	a.Write([]byte("x"))
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the file appeared before Commit")
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}
	if err := a.Abort(); err != nil {
		t.Errorf("Abort after Commit: %v", err)
	}
	b, _ := Create(path, 0o600)
	b.Write([]byte("y"))
	if err := b.Abort(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "x" {
		t.Errorf("after an aborted rewrite: %q, want %q", got, "x")
	}
	if _, err := os.Stat(path + TmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Error("Abort left the temporary file")
	}
}

func TestAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	for _, l := range []string{"a\n", "b\n"} {
		if err := Append(path, 0o644, []byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	if diff := cmp.Diff("a\nb\n", string(got)); diff != "" {
		t.Error(diff)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
}

// TestAppendCutsTornLine: a last line without its newline (an append cut
// short) is cut off before the next append, which stays a line of its own.
func TestAppendCutsTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nhal"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Append(path, 0o600, []byte("b\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if diff := cmp.Diff("a\nb\n", string(got)); diff != "" {
		t.Error(diff)
	}
}

// TestWriteNeverOpensAPlantedTemporary plants at path+TmpSuffix what
// another user of a shared directory (/tmp) could: a symbolic link to a
// file of this user's, or a hard link to one (as another user's
// world-writable file would be). Write must neither write through it into
// the victim nor leave the victim's inode, with its mode, at path.
func TestWriteNeverOpensAPlantedTemporary(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(victim, tmp string) error
	}{
		{"symlink", os.Symlink},
		{"hard link to a world-writable file", os.Link},
		{"dangling symlink", func(victim, tmp string) error { return os.Symlink(victim+".missing", tmp) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			victim, path := filepath.Join(dir, "victim"), filepath.Join(dir, "out")
			if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(victim, 0o666); err != nil {
				t.Fatal(err)
			}
			if err := tc.plant(victim, path+TmpSuffix); err != nil {
				t.Fatal(err)
			}
			if err := WriteBytes(path, 0o600, []byte("profile")); err != nil {
				t.Fatal(err)
			}
			type state struct {
				Victim, Out     string
				OutMode         os.FileMode
				OutIsVictim     bool
				MissingAppeared bool
			}
			var got state
			v, _ := os.ReadFile(victim)
			o, _ := os.ReadFile(path)
			got.Victim, got.Out = string(v), string(o)
			vi, _ := os.Stat(victim)
			if oi, err := os.Lstat(path); err == nil {
				got.OutMode, got.OutIsVictim = oi.Mode(), os.SameFile(oi, vi)
			}
			_, err := os.Lstat(victim + ".missing")
			got.MissingAppeared = err == nil
			want := state{Victim: "precious", Out: "profile", OutMode: 0o600}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("after Write over a planted %s (-want +got):\n%s", tc.name, d)
			}
		})
	}
}
