package lab

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEachWeek: weeks run 1 to n in order; a week's error or a cancelled
// context stops the run before the next week and is returned.
func TestEachWeek(t *testing.T) {
	errWeek := errors.New("week failed")
	for _, tc := range []struct {
		name     string
		n        int
		failAt   int // the week that returns errWeek (0: none)
		cancelAt int // the week after which ctx is cancelled (0: never)
		want     []int
		wantErr  error
	}{
		{name: "all weeks", n: 4, want: []int{1, 2, 3, 4}},
		{name: "no weeks", n: 0, want: nil},
		{name: "a week fails", n: 4, failAt: 2, want: []int{1, 2}, wantErr: errWeek},
		{name: "cancelled", n: 4, cancelAt: 3, want: []int{1, 2, 3}, wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var ran []int
			err := eachWeek(ctx, tc.n, func(w int) error {
				ran = append(ran, w)
				if w == tc.cancelAt {
					cancel()
				}
				if w == tc.failAt {
					return errWeek
				}
				return nil
			})
			if !errors.Is(err, tc.wantErr) { // with wantErr nil: only a nil err
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, ran); diff != "" {
				t.Errorf("weeks run (-want +got):\n%s", diff)
			}
		})
	}
}
