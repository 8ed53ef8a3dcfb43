package batch

import (
	"context"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/coupond/coupond/store/storefs"
)

// TestCheckResults: admin check's read of the result files reports a
// completed job whose file is damaged (a flipped byte: the download answered
// 200 and stopped mid-stream) or missing (404 for a completed job), and
// nothing for a sound one. It read none of them.
func TestCheckResults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string) error
		want   string // the reason's start; "" for none
	}{
		{"sound", func(string) error { return nil }, ""},
		{"missing", os.Remove, "missing"},
		{"flipped byte", func(path string) error {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0xff
			return os.WriteFile(path, b, 0o600)
		}, "does not decompress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newJobEnv(t, storefs.Mem(), "db", 3, -1)
			e.customers(t, 400)
			j := e.submitAll(t)
			e.r.RunPending(context.Background())
			j, _ = e.r.Job("acme", j.ID)
			path, ok := e.r.ResultFile(j)
			if !ok {
				t.Fatalf("job not completed: %+v", j)
			}
			if err := tc.damage(path); err != nil {
				t.Fatal(err)
			}
			got, err := e.r.CheckResults("")
			if err != nil {
				t.Fatal(err)
			}
			var reasons []string
			for _, d := range got {
				if d.JobID != j.ID || d.Tenant != "acme" {
					t.Errorf("reported %+v, want job %s of acme", d, j.ID)
				}
				reasons = append(reasons, d.Reason[:min(len(d.Reason), len(tc.want))])
			}
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if diff := cmp.Diff(want, reasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVerifiedResultsForgotten: VerifyResult remembers each file it read
// whole, by path, for the life of the process; the entry of a file that
// retention or a drop removes goes with it. It stayed: one more entry for
// every downloaded result the process ever saw.
func TestVerifiedResultsForgotten(t *testing.T) {
	e, j, path := completedResult(t, 50)
	res, err := OpenResult(path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if err := e.r.VerifyResult(res); err != nil {
		t.Fatal(err)
	}
	remembered := func() int {
		n := 0
		e.r.verified.Range(func(any, any) bool { n++; return true })
		return n
	}
	if n := remembered(); n != 1 {
		t.Fatalf("%d files remembered after a verification, want 1", n)
	}
	if err := e.r.DropResult(j, "test"); err != nil {
		t.Fatal(err)
	}
	if n := remembered(); n != 0 {
		t.Errorf("%d files remembered after the result was removed, want 0", n)
	}
}

// TestCheckResultsForgetsVerified: a result file verified by a download and
// damaged in place since (its size and time unchanged: a bad sector) is
// found by admin check, and then read again by the next download's
// VerifyResult, which answers its error: admin check says the download
// answers 500. The download trusted its earlier verification and sent a
// 200 it cut short.
func TestCheckResultsForgetsVerified(t *testing.T) {
	e, _, path := completedResult(t, 400)
	verify := func() error {
		res, err := OpenResult(path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Close()
		return e.r.VerifyResult(res)
	}
	if err := verify(); err != nil {
		t.Fatal(err)
	}
	damageInPlace(t, path)
	if err := verify(); err != nil {
		t.Logf("verified again before admin check: %v", err)
		t.Fatal("the damaged file was read again: the test does not keep its stamp")
	}
	if got, err := e.r.CheckResults(""); err != nil || len(got) != 1 {
		t.Fatalf("CheckResults: %v %+v, want the damaged file", err, got)
	}
	if err := verify(); err == nil {
		t.Error("VerifyResult after admin check found the damage: nil, want its error")
	}
}

// damageInPlace flips a byte in the middle of the file at path and puts its
// modification time back, as a bad sector would leave it.
func damageInPlace(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// completedResult runs a job over all n customers (submitAll) to its end and returns its
// environment, the job as stored and its result file's path.
func completedResult(t *testing.T, n int) (*jobEnv, *Job, string) {
	t.Helper()
	e := newJobEnv(t, storefs.Mem(), "db", 3, -1)
	e.customers(t, n)
	j := e.submitAll(t)
	e.r.RunPending(context.Background())
	j, _ = e.r.Job("acme", j.ID)
	path, ok := e.r.ResultFile(j)
	if !ok {
		t.Fatalf("job not completed: %+v", j)
	}
	return e, j, path
}
