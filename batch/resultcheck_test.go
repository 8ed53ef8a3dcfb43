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
	e := newJobEnv(t, storefs.Mem(), "db", 3, -1)
	e.customers(t, 50)
	j := e.submitAll(t)
	e.r.RunPending(context.Background())
	j, _ = e.r.Job("acme", j.ID)
	path, ok := e.r.ResultFile(j)
	if !ok {
		t.Fatalf("job not completed: %+v", j)
	}
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
